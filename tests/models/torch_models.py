"""The networks of the real-model test set that torchvision does not ship, and the changes
export_models.py makes to those it does: a small BERT-style encoder, a recurrent tagger,
detectors built with random weights (and their first image's detections, to check the export
keeps some), and randomized BatchNorm statistics. `torch`/`torchvision` are passed in: this
module imports neither, so export_models.py can skip cleanly where they are missing.
"""
import math


def build_encoder(torch):
    nn = torch.nn

    class SelfAttention(nn.Module):
        def __init__(self, hidden, heads):
            super().__init__()
            self.heads, self.head_dim = heads, hidden // heads
            self.q = nn.Linear(hidden, hidden)
            self.k = nn.Linear(hidden, hidden)
            self.v = nn.Linear(hidden, hidden)
            self.o = nn.Linear(hidden, hidden)

        def split(self, x):  # [B, T, H*D] -> [B, H, T, D]
            b, t = x.shape[0], x.shape[1]
            return x.reshape(b, t, self.heads, self.head_dim).transpose(1, 2)

        def forward(self, x, mask_bias):
            q, k, v = self.split(self.q(x)), self.split(self.k(x)), self.split(self.v(x))
            scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
            probs = torch.softmax(scores + mask_bias, dim=-1)
            ctx = torch.matmul(probs, v).transpose(1, 2)
            return self.o(ctx.reshape(x.shape[0], x.shape[1], -1))

    class EncoderLayer(nn.Module):
        def __init__(self, hidden, heads, ff):
            super().__init__()
            self.attn = SelfAttention(hidden, heads)
            self.ln1 = nn.LayerNorm(hidden, eps=1e-12)
            self.ff1 = nn.Linear(hidden, ff)
            self.ff2 = nn.Linear(ff, hidden)
            self.ln2 = nn.LayerNorm(hidden, eps=1e-12)
            self.drop = nn.Dropout(0.1)

        def forward(self, x, mask_bias):
            x = self.ln1(x + self.drop(self.attn(x, mask_bias)))
            h = self.ff1(x)
            h = 0.5 * h * (1.0 + torch.erf(h / math.sqrt(2.0)))  # GELU, erf form
            return self.ln2(x + self.drop(self.ff2(h)))

    class TinyBert(nn.Module):
        def __init__(self, vocab=1000, max_len=64, hidden=64, heads=4, ff=256, layers=2):
            super().__init__()
            self.tok = nn.Embedding(vocab, hidden)
            self.pos = nn.Embedding(max_len, hidden)
            self.ln = nn.LayerNorm(hidden, eps=1e-12)
            self.drop = nn.Dropout(0.1)
            self.layers = nn.ModuleList(EncoderLayer(hidden, heads, ff) for _ in range(layers))
            self.pool = nn.Linear(hidden, hidden)
            self.vocab = vocab

        def forward(self, input_ids, attention_mask):
            t = input_ids.shape[1]
            pos = torch.arange(t, dtype=torch.int64, device=input_ids.device).unsqueeze(0)
            x = self.drop(self.ln(self.tok(input_ids) + self.pos(pos)))
            mask_bias = ((1.0 - attention_mask) * -10000.0)[:, None, None, :]
            for layer in self.layers:
                x = layer(x, mask_bias)
            pooled = torch.tanh(self.pool(x[:, 0]))
            return x, pooled

    return TinyBert()


def build_tagger(torch):
    """A sequence tagger: embeddings, a bidirectional LSTM, a GRU over its states, per-token
    logits (the recurrent family as torch exports it: LSTM/GRU nodes with Transposes around
    them for batch_first)."""
    nn = torch.nn

    class Tagger(nn.Module):
        def __init__(self, vocab=500, emb=32, hidden=48, tags=9):
            super().__init__()
            self.vocab = vocab
            self.emb = nn.Embedding(vocab, emb)
            self.lstm = nn.LSTM(emb, hidden, batch_first=True, bidirectional=True)
            self.gru = nn.GRU(2 * hidden, hidden, batch_first=True)
            self.out = nn.Linear(hidden, tags)

        def forward(self, tokens):
            y, _ = self.lstm(self.emb(tokens))
            y, _ = self.gru(y)
            return self.out(y)

    return Tagger()


def build_detector(name, torchvision):
    """torchvision's detectors with their post-processing in the graph (score thresholds through
    NonZero, TopK, per-class NonMaxSuppression, box decoding; Faster R-CNN also RoiAlign over
    the FPN levels): output sizes depend on the image. Random weights score every box low, so
    the thresholds drop to keep detections in the expected outputs."""
    det = torchvision.models.detection
    kw = dict(weights=None, weights_backbone=None, num_classes=5)
    if name == "ssdlite":  # SSDlite320, MobileNetV3 backbone
        return det.ssdlite320_mobilenet_v3_large(**kw)
    if name == "retinanet":  # ResNet-50 FPN, focal-loss heads, 256 x 256 images
        return det.retinanet_resnet50_fpn(min_size=256, max_size=256, score_thresh=0.005,
                                          detections_per_img=30, **kw)
    # Faster R-CNN, MobileNetV3 FPN at 320: region proposals, RoiAlign, box head
    return det.fasterrcnn_mobilenet_v3_large_320_fpn(box_score_thresh=0.0,
                                                     box_detections_per_img=30, **kw)


def first_image_detections(torch, det):
    """[1, 3, H, W] in, the first image's boxes, scores and labels out."""
    class FirstImage(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, x):
            d = self.m([x[0]])[0]
            return d["boxes"], d["scores"], d["labels"]

    return FirstImage(det)


def randomize_batchnorm(torch, model):
    g = torch.Generator().manual_seed(1234)
    for m in model.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            n = m.num_features
            m.running_mean.copy_(torch.randn(n, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(n, generator=g) * 0.5 + 0.75)
            m.weight.data.copy_(torch.rand(n, generator=g) * 0.5 + 0.75)
            m.bias.data.copy_(torch.randn(n, generator=g) * 0.1)
    # Keep residual branches small, as in trained networks, so activations (and the float
    # error that different summation orders leave) stay O(1) through 50 layers.
    for block in model.modules():
        last = getattr(block, "bn3", None) if hasattr(block, "conv3") else (
            getattr(block, "bn2", None) if hasattr(block, "downsample") else None)
        if last is not None:
            last.weight.data.mul_(0.2)
