"""QDQ static quantization of a float ONNX CNN, written the way ONNX Runtime's quantization tool
(onnxruntime.quantization.quantize_static, QuantFormat.QDQ, MinMax calibration) writes it; no
quantization tool is needed (export_models.py builds resnet18_qdq and mobilenet_v2_qdq here).

    ranges = calibrate(model, input_name, batch, run)   # {tensor: (min, max)}, 0 included
    qmodel = quantize(model, ranges)                    # the QDQ model, checker-clean

What it writes (QOperator-free: only QuantizeLinear/DequantizeLinear around float ops):
  * activations: uint8, asymmetric, per tensor; scale = (max - min) / 255, zero point =
    round(-min / scale) in [0, 255]. Every activation read by a Conv, Gemm, Add, MaxPool or
    GlobalAveragePool, and the model input, gets one QuantizeLinear -> DequantizeLinear pair
    shared by all its readers. A Conv followed by Relu/Clip is quantized after the activation
    only: the Conv output is read by the activation, not by a quantized op. MaxPool's output
    reuses its input's scale and zero point (ORT's quantize_output_same_as_input), so ORT runs
    it on the uint8 data.
  * Conv weights: int8, symmetric (zero point 0), per output channel (axis 0), scale =
    max|w| / 127; Gemm weights the same per tensor. Stored quantized, behind a DequantizeLinear.
  * biases: int32, zero point 0, scale = x_scale * w_scale (per channel for Conv), behind a
    DequantizeLinear, as ORT's quantize_bias_static writes them.
  * the graph outputs (logits) stay float.
Differences from ORT's defaults: ORT drops a Relu/Clip that follows a quantized op and
quantizes that op's output with the activation's range; here the activation stays and only its
output is quantized (the same numbers: a range starting at 0 has zero point 0, so
QuantizeLinear clamps what Relu would). ORT also quantizes the outputs of GlobalAveragePool and
of the final Gemm; here the GlobalAveragePool output is quantized after the Flatten that reads
it, and the logits stay float. Weights and scales are initializers, named as ORT names them
(<t>_quantized, <t>_scale, <t>_zero_point, <t>_QuantizeLinear_Output, ...).
"""
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

# Ops whose activation inputs are quantized (their readers get the dequantized tensor).
QUANTIZED_READERS = {"Conv", "Gemm", "Add", "MaxPool", "GlobalAveragePool"}
# Ops whose output takes its input's scale and zero point: a max of dequantized values is one of
# them, so ORT drops the pair around it and runs it on the uint8 data.
SAME_AS_INPUT = {"MaxPool"}


# ----------------------------------------------------------------------------- calibration

def with_all_outputs(model):
    """The model with every float node output added as a graph output, for calibration (ORT's
    calibrator adds ReduceMin/ReduceMax nodes instead; the ranges are the same)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    inferred = onnx.shape_inference.infer_shapes(m)
    types = {v.name: v.type.tensor_type.elem_type for v in inferred.graph.value_info}
    have = {o.name for o in m.graph.output}
    for node in m.graph.node:
        for t in node.output:
            if t and t not in have and types.get(t) == TensorProto.FLOAT:
                m.graph.output.append(helper.make_tensor_value_info(t, TensorProto.FLOAT, None))
                have.add(t)
    return m


def calibrate(model, input_name, batch, run):
    """{tensor: (min, max)} over `batch` for the model input and every float intermediate, each
    range widened to include 0 (ORT's MinMax calibrator does, so zero is exactly representable
    and the zero point is a valid uint8). `run(model_proto, names, arrays)` runs ONNX Runtime
    and returns [(name, array)]."""
    ranges = {input_name: (float(batch.min()), float(batch.max()))}
    for name, a in run(with_all_outputs(model), [input_name], [batch]):
        ranges[name] = (float(a.min()), float(a.max()))
    return {t: (min(lo, 0.0), max(hi, 0.0)) for t, (lo, hi) in ranges.items()}


# ----------------------------------------------------------------------------- parameters

def activation_params(lo, hi):
    """uint8 asymmetric (scale, zero point) for the range [lo, hi] (lo <= 0 <= hi), as ORT's
    compute_scale_zp: an empty range gets scale 1 so dequantization stays defined."""
    scale = np.float32((hi - lo) / 255.0) if hi > lo else np.float32(1.0)
    zp = np.clip(np.round(-np.float32(lo) / scale), 0, 255)
    return scale, np.uint8(zp)


def symmetric_scale(absmax):
    """int8 symmetric scale(s): max|w| / 127 (the range [-127, 127], so -w quantizes like w);
    an all-zero channel gets scale 1."""
    absmax = np.asarray(absmax, dtype=np.float32)
    return np.where(absmax > 0, absmax / np.float32(127.0), np.float32(1.0)).astype(np.float32)


def quantize_array(x, scale, zp, lo, hi, dtype):
    """round-half-even(x / scale) + zp, saturated: QuantizeLinear's arithmetic, in float32 as
    ONNX specifies for a float32 scale."""
    q = np.round(x.astype(np.float32) / scale) + zp
    return np.clip(q, lo, hi).astype(dtype)


# ----------------------------------------------------------------------------- graph editing

class _Builder:
    """Collects the new initializers and DequantizeLinear nodes of one quantization."""

    def __init__(self, graph):
        self.inits = {t.name: t for t in graph.initializer}
        self.new_inits = []

    def add_init(self, name, array):
        self.new_inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    @staticmethod
    def dq(q_name, scale_name, zp_name, prefix, axis=None):
        """DequantizeLinear writing <prefix>_DequantizeLinear_Output (ORT's naming)."""
        attrs = {} if axis is None else {"axis": axis}
        return helper.make_node("DequantizeLinear", [q_name, scale_name, zp_name],
                                [f"{prefix}_DequantizeLinear_Output"],
                                name=f"{prefix}_DequantizeLinear", **attrs)


def _qdq_pair(tensor, scale, zp, b):
    """Q -> DQ nodes for an activation; returns (nodes, the dequantized tensor's name)."""
    s = b.add_init(f"{tensor}_scale", scale)
    z = b.add_init(f"{tensor}_zero_point", zp)
    q_out = f"{tensor}_QuantizeLinear_Output"
    q = helper.make_node("QuantizeLinear", [tensor, s, z], [q_out], name=f"{tensor}_QuantizeLinear")
    dq = b.dq(q_out, s, z, tensor)
    return [q, dq], dq.output[0]


def _quantized_weight(node, x_scale, b):
    """The DQ nodes for a Conv/Gemm's weight and bias; rewires the node to read them."""
    per_channel = node.op_type == "Conv"
    w_name = node.input[1]
    w = numpy_helper.to_array(b.inits[w_name]).astype(np.float32)
    if per_channel:
        scale = symmetric_scale(np.abs(w.reshape(w.shape[0], -1)).max(axis=1))
        zp = np.zeros(w.shape[0], np.int8)
        bshape = (-1,) + (1,) * (w.ndim - 1)
        wq = quantize_array(w, scale.reshape(bshape), 0, -127, 127, np.int8)
    else:  # per tensor: scalar scale and zero point
        scale, zp = symmetric_scale(np.abs(w).max()), np.int8(0)
        wq = quantize_array(w, scale, 0, -127, 127, np.int8)
    axis = 0 if per_channel else None
    nodes = [b.dq(b.add_init(f"{w_name}_quantized", wq), b.add_init(f"{w_name}_scale", scale),
                  b.add_init(f"{w_name}_zero_point", zp), w_name, axis)]
    node.input[1] = nodes[-1].output[0]
    if len(node.input) > 2 and node.input[2]:
        nodes.append(_quantized_bias(node, x_scale, scale, axis, b))
    return nodes


def _quantized_bias(node, x_scale, w_scale, axis, b):
    """int32 bias with scale x_scale * w_scale and zero point 0 (ORT's quantize_bias_static):
    the scale the int32 accumulator of x_q * w_q has, so a fused kernel adds it directly."""
    b_name = node.input[2]
    bias = numpy_helper.to_array(b.inits[b_name]).astype(np.float32)
    scale = (np.float32(x_scale) * w_scale).astype(np.float32)
    if axis is None:
        scale = np.float32(scale)
    bq = np.clip(np.round(bias / scale), -2**31, 2**31 - 1).astype(np.int32)
    zp = np.zeros(bias.shape, np.int32) if axis is not None else np.int32(0)
    q = f"{b_name}_quantized"
    dq = b.dq(b.add_init(q, bq), b.add_init(f"{q}_scale", scale), b.add_init(f"{q}_zero_point", zp),
              q, axis)
    node.input[2] = dq.output[0]
    return dq


def _activations_to_quantize(graph, inits):
    """Tensors that get a QDQ pair, in graph order: the inputs, then every activation read by a
    quantized op (weights/biases are initializers and are handled per op)."""
    out = [i.name for i in graph.input if i.name not in inits]
    for node in graph.node:
        if node.op_type in QUANTIZED_READERS:
            reads = node.input[:1] if node.op_type in ("Conv", "Gemm") else node.input
            out += [t for t in reads if t and t not in inits and t not in out]
    return out


def _params(tensors, graph, ranges):
    """(scale, zero point) per quantized tensor; MaxPool outputs copy their input's."""
    producer = {o: n for n in graph.node for o in n.output}
    params = {}
    for t in tensors:  # graph order: a MaxPool's input is decided before its output
        p = producer.get(t)
        if p is not None and p.op_type in SAME_AS_INPUT and p.input[0] in params:
            params[t] = params[p.input[0]]
        else:
            params[t] = activation_params(*ranges[t])
    return params


def quantize(model, ranges):
    """The QDQ model of float `model` given calibrated `ranges` ({tensor: (min, max)})."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    b = _Builder(g)
    params = _params(_activations_to_quantize(g, b.inits), g, ranges)
    dq_of = {}  # quantized tensor -> its dequantized copy, which every reader reads
    nodes = []
    for t in [i.name for i in g.input if i.name in params]:
        pair, dq_of[t] = _qdq_pair(t, *params[t], b)
        nodes += pair
    for original in g.node:
        node = onnx.NodeProto()
        node.CopyFrom(original)
        # The bias scale needs the scale of the activation the Conv/Gemm reads.
        x_scale = params[node.input[0]][0] if node.input and node.input[0] in params else None
        for k, t in enumerate(node.input):
            if t in dq_of:
                node.input[k] = dq_of[t]
        if node.op_type in ("Conv", "Gemm") and node.input[1] in b.inits:
            nodes += _quantized_weight(node, x_scale, b)
        nodes.append(node)
        for t in node.output:
            if t in params:
                pair, dq_of[t] = _qdq_pair(t, *params[t], b)
                nodes += pair
    del g.node[:]
    g.node.extend(nodes)
    _replace_initializers(g, b)
    onnx.checker.check_model(m)
    return m


def _replace_initializers(graph, b):
    """Drops the float weights/biases now read through DequantizeLinear; adds the new ones."""
    used = {t for n in graph.node for t in n.input}
    for k in reversed(range(len(graph.initializer))):
        if graph.initializer[k].name not in used:
            del graph.initializer[k]
    graph.initializer.extend(b.new_inits)


# ----------------------------------------------------------------------------- tolerance

def output_quantum(model):
    """One quantum of the last quantized activation in output units: s_x * max_j ||W_j||_2 for
    an output y = W x (+ b) computed by a Gemm/MatMul from a dequantized activation x of scale
    s_x and dequantized weights (W_j: the weights of output j). An int8 engine and a float
    simulation of the same QDQ graph round a few requantization ties the other way; the
    difference cascades through the layers and leaves some elements of x whole quanta apart
    (d_k in {.., -1, 0, 1, ..}). Output j then differs by s_x * sum_k W_jk d_k: a sum of
    random-sign terms, whose size is s_x * ||W_j||_2 * rms(d): this unit times rms(d)."""
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    producer = {o: n for n in model.graph.node for o in n.output}
    units = []
    for out in model.graph.output:
        node = producer[out.name]
        if node.op_type not in ("Gemm", "MatMul"):
            raise ValueError(f"output {out.name} comes from {node.op_type}, not a Gemm/MatMul")
        s_x = float(inits[_dequantize_node(producer, node.input[0]).input[1]])
        w = _dequantized_initializer(_dequantize_node(producer, node.input[1]), inits)
        trans_b = any(a.name == "transB" and a.i for a in node.attribute)
        per_output = w if trans_b else w.T  # rows: the weights of one output
        units.append(s_x * float(np.linalg.norm(per_output, axis=1).max()))
    return max(units)


def _dequantize_node(producer, tensor):
    node = producer.get(tensor)
    if node is None or node.op_type != "DequantizeLinear":
        raise ValueError(f"{tensor} is not the output of a DequantizeLinear")
    return node


def _dequantized_initializer(dq, inits):
    """(q - zero_point) * scale of a DequantizeLinear of initializers, in float64."""
    q, scale = inits[dq.input[0]].astype(np.float64), inits[dq.input[1]].astype(np.float64)
    zp = inits[dq.input[2]].astype(np.float64) if len(dq.input) > 2 else np.zeros_like(scale)
    if scale.ndim == 0:
        return (q - zp) * scale
    axis = next((a.i for a in dq.attribute if a.name == "axis"), 1)
    shape = [-1 if k == axis % q.ndim else 1 for k in range(q.ndim)]
    return (q - zp.reshape(shape)) * scale.reshape(shape)
