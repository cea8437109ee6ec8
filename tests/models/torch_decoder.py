#!/usr/bin/env python3
"""A GPT-2-style decoder with past written in PyTorch the way Hugging Face transformers 4.2x's
GPT2Model computes, and exported by torch.onnx.export (not built node by node): what kilnd
meets when a user exports such a model with input_ids, attention_mask and the past.

  torch_decoder.py --write DIR [--no-mask] [--cache-position]

Its positions are counted from the past's length (torch.arange(past, past + seq).unsqueeze(0)
.view(-1, seq), no position_ids input); the mask enters as (1 - mask) * -10000 over
[batch, 1, 1, keys]; the causal mask is sliced from a lower-triangular buffer by the key
length; an untied output head. Inputs input_ids [batch, sequence], attention_mask [batch,
"past_sequence_length + sequence"] (absent with --no-mask), past_key_values.{i}.key/value
[batch, 4, past_sequence_length, 16]; outputs logits [batch, sequence, 1000] and
present.{i}.key/value. --cache-position writes the later transformers form instead (4.4x):
cache_position = arange(past, past + seq) gives both the positions (unsqueeze(0)) and the
causal mask (triu, then arange(keys) > cache_position.reshape(-1, 1)). Random weights
(seeded). Exit codes: 0 written, 77 torch missing.
"""
import argparse
import os
import sys

HIDDEN, LAYERS, HEADS, VOCAB = 64, 2, 4, 1000


def causal_from_cache_position(torch, cache_position, seq, keys):
    """[1, 1, seq, keys]: -1e4 where key j comes after query i's position cache_position[i]."""
    causal = torch.triu(torch.full((seq, keys), -1e4), diagonal=1)
    causal = causal * (torch.arange(keys) > cache_position.reshape(-1, 1))
    return causal[None, None, :, :]


def build(torch, with_mask, cache_position_form):
    nn = torch.nn
    head_dim = HIDDEN // HEADS

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_attn = nn.Linear(HIDDEN, 3 * HIDDEN)
            self.c_proj = nn.Linear(HIDDEN, HIDDEN)
            self.register_buffer("bias", torch.tril(torch.ones(1024, 1024)).view(1, 1, 1024, 1024))

        def forward(self, x, past_k, past_v, mask, causal_add):
            q, k, v = self.c_attn(x).split(HIDDEN, dim=2)

            def heads(t):
                return t.view(t.size(0), t.size(1), HEADS, head_dim).permute(0, 2, 1, 3)

            q, k, v = heads(q), heads(k), heads(v)
            k, v = torch.cat((past_k, k), dim=-2), torch.cat((past_v, v), dim=-2)
            w = torch.matmul(q, k.transpose(-1, -2)) / (head_dim ** 0.5)
            if causal_add is None:
                queries, keys = q.size(-2), k.size(-2)
                causal = self.bias[:, :, keys - queries:keys, :keys].bool()
                w = torch.where(causal, w, torch.tensor(-1e4, dtype=w.dtype))
            else:
                w = w + causal_add
            if mask is not None:
                w = w + mask
            o = torch.matmul(torch.softmax(w, dim=-1), v).permute(0, 2, 1, 3).contiguous()
            return self.c_proj(o.view(o.size(0), o.size(1), HIDDEN)), k, v

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.attn, self.ln_2 = nn.LayerNorm(HIDDEN), Attention(), nn.LayerNorm(HIDDEN)
            self.fc, self.proj = nn.Linear(HIDDEN, 4 * HIDDEN), nn.Linear(4 * HIDDEN, HIDDEN)

        def forward(self, x, past_k, past_v, mask, causal_add):
            a, k, v = self.attn(self.ln_1(x), past_k, past_v, mask, causal_add)
            x = x + a
            return x + self.proj(nn.functional.gelu(self.fc(self.ln_2(x)))), k, v

    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(VOCAB, HIDDEN), nn.Embedding(1024, HIDDEN)
            self.wpe.weight.data *= 3  # positions that move the logits when they are wrong
            self.h = nn.ModuleList([Block() for _ in range(LAYERS)])
            self.ln_f = nn.LayerNorm(HIDDEN)
            self.head = nn.Parameter(torch.randn(HIDDEN, VOCAB) * 0.5)

        def forward(self, input_ids, *rest):
            mask, past = (rest[0], rest[1:]) if with_mask else (None, rest)
            seq = input_ids.size(-1)
            past_length = past[0].size(-2)
            causal_add = None
            if cache_position_form:
                cache_position = torch.arange(past_length, past_length + seq, dtype=torch.long)
                positions = cache_position.unsqueeze(0)
                causal_add = causal_from_cache_position(torch, cache_position, seq,
                                                        past_length + seq)
            else:
                positions = torch.arange(past_length, seq + past_length, dtype=torch.long)
                positions = positions.unsqueeze(0).view(-1, seq)
            if mask is not None:
                mask = (1.0 - mask[:, None, None, :].to(torch.float32)) * -10000.0
            x = self.wte(input_ids) + self.wpe(positions)
            presents = []
            for i, block in enumerate(self.h):
                x, k, v = block(x, past[2 * i], past[2 * i + 1], mask, causal_add)
                presents += [k, v]
            return (self.ln_f(x) @ self.head,) + tuple(presents)

    return Decoder().eval()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--write", required=True, help="write DIR/model.onnx")
    ap.add_argument("--no-mask", action="store_true", help="no attention_mask input")
    ap.add_argument("--cache-position", action="store_true",
                    help="positions and causal mask from one cache_position Range")
    a = ap.parse_args()
    try:
        import torch
    except ImportError:
        return 77
    torch.manual_seed(0)
    model = build(torch, not a.no_mask, a.cache_position)
    batch, past_len, seq = 2, 3, 2
    past_names = [f"past_key_values.{i}.{kv}" for i in range(LAYERS) for kv in ("key", "value")]
    inputs = ["input_ids"] + ([] if a.no_mask else ["attention_mask"]) + past_names
    outputs = ["logits"] + [n.replace("past_key_values", "present") for n in past_names]
    args = [torch.randint(0, VOCAB, (batch, seq))]
    if not a.no_mask:
        args.append(torch.ones(batch, past_len + seq, dtype=torch.long))
    args += [torch.randn(batch, HEADS, past_len, HIDDEN // HEADS) for _ in past_names]
    total = "past_sequence_length + sequence"
    dims = {"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: total},
            "logits": {0: "batch", 1: "sequence"}}
    dims.update({n: {0: "batch", 2: "past_sequence_length"} for n in past_names})
    dims.update({n: {0: "batch", 2: total} for n in outputs[1:]})
    os.makedirs(a.write, exist_ok=True)
    with torch.no_grad():
        torch.onnx.export(model, tuple(args), os.path.join(a.write, "model.onnx"),
                          input_names=inputs, output_names=outputs,
                          dynamic_axes={k: v for k, v in dims.items() if k in inputs + outputs},
                          opset_version=14)
    return 0


if __name__ == "__main__":
    sys.exit(main())
