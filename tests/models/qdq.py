"""QDQ static quantization of a float ONNX model, written the way ONNX Runtime's quantization
tool (onnxruntime.quantization.quantize_static, QuantFormat.QDQ, MinMax calibration) writes it;
no quantization tool is needed (export_models.py builds resnet18_qdq, mobilenet_v2_qdq and
bert_tiny_qdq here).

    ranges = calibrate(model, input_name, batch, run)   # {tensor: (min, max)}, 0 included
    qmodel = quantize(model, ranges)                    # a CNN's QDQ model, checker-clean

    values = calibration_values(model, names, arrays, run)  # several inputs (a transformer's)
    ranges = value_ranges(values)
    qmodel = quantize_linear_layers(model, ranges)      # a transformer's QDQ model
    unit = output_quantum(qmodel, row_std(values, layernorm_inputs(qmodel)))

What quantize writes for a CNN (QOperator-free: only QuantizeLinear/DequantizeLinear around
float ops):
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

What quantize_linear_layers writes for a transformer (torch exports nn.Linear on a [B, T, K]
input as MatMul(x, W[K, N]) -> Add(bias)): every MatMul whose second operand is a constant
[K, N] matrix (a Linear layer) gets
  * int8 weights, symmetric, per output column (axis 1 of [K, N], ORT's default channel axis
    for a MatMul weight), scale = max_k |W[k, n]| / 127, behind a DequantizeLinear;
  * its activation input and its output QDQ'd (uint8, per tensor, as above), the pair shared
    by all readers (the residual Add reads the dequantized LayerNorm output, as under ORT,
    which rewires every reader of a quantized tensor). The bias Add then reads a DQ: that is
    the DQ -> MatMul -> Q group ORT (and Kiln) run as QLinearMatMul.
That is what ORT writes with op_types_to_quantize=["MatMul"] (its QDQMatMul quantizes both
inputs and the output) and the attention MatMuls (both operands activations) in
nodes_to_exclude. Everything else stays float: the attention MatMuls, Softmax,
LayerNormalization, the erf GELU, the embedding Gathers, the Adds and a Linear on a 2-D input
(exported as Gemm: the pooler). ORT's default op list would quantize most of these too (Add,
Mul, Softmax, Gather, LayerNormalization, Gemm, all MatMuls); the int8 win of a transformer is
in its Linear layers, and an engine fuses only a MatMul with constant weights.
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
    return value_ranges(calibration_values(model, [input_name], [batch], run))


def calibration_values(model, names, arrays, run):
    """{tensor: array} over the calibration batch: the float model inputs (`names`, `arrays`:
    every input; integer ones such as token ids are fed but not kept), then every float
    intermediate, as ONNX Runtime computes them."""
    values = {n: a for n, a in zip(names, arrays) if a.dtype == np.float32}
    values.update(run(with_all_outputs(model), names, arrays))
    return values


def value_ranges(values):
    """{tensor: (min, max)} of calibration_values, each range widened to include 0."""
    ranges = {t: (float(a.min()), float(a.max())) for t, a in values.items()}
    return {t: (min(lo, 0.0), max(hi, 0.0)) for t, (lo, hi) in ranges.items()}


def row_std(values, tensors):
    """{tensor: the smallest standard deviation of a row (last axis)} over the calibration
    batch, for the inputs of LayerNormalizations (output_quantum: a LayerNorm multiplies an
    error in its input by gamma / std of the row)."""
    return {t: float(np.sqrt(values[t].astype(np.float64).var(axis=-1)).min()) for t in tensors}


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
    """The QDQ model of float CNN `model` given calibrated `ranges` ({tensor: (min, max)})."""
    def plan(graph, inits):
        return _params(_activations_to_quantize(graph, inits), graph, ranges)

    def weights(node, x_scale, b):
        if node.op_type in ("Conv", "Gemm") and node.input[1] in b.inits:
            return _quantized_weight(node, x_scale, b)
        return []

    return _rewrite(model, plan, weights)


def quantize_linear_layers(model, ranges):
    """The QDQ model of float transformer `model` given calibrated `ranges`: its Linear layers'
    MatMuls quantized (int8 per-column weights, QDQ'd input and output), the rest float."""
    def plan(graph, inits):
        tensors = []
        for node in _linear_matmuls(graph, inits):
            tensors += [t for t in (node.input[0], node.output[0]) if t not in tensors]
        return {t: activation_params(*ranges[t]) for t in tensors}

    def weights(node, x_scale, b):
        if node.op_type == "MatMul" and node.input[1] in b.inits:
            return [_quantized_matrix(node, b)]
        return []

    return _rewrite(model, plan, weights)


def _linear_matmuls(graph, inits):
    """The MatMuls of Linear layers: an activation times a constant [K, N] matrix."""
    return [n for n in graph.node if n.op_type == "MatMul" and n.input[0] not in inits and
            n.input[1] in inits and len(inits[n.input[1]].dims) == 2]


def _quantized_matrix(node, b):
    """The DQ node for a MatMul's constant [K, N] weights: int8, symmetric, one scale per output
    column (axis 1), max_k |W[k, n]| / 127; rewires the node to read it."""
    w_name = node.input[1]
    w = numpy_helper.to_array(b.inits[w_name]).astype(np.float32)
    scale = symmetric_scale(np.abs(w).max(axis=0))
    wq = quantize_array(w, scale.reshape(1, -1), 0, -127, 127, np.int8)
    dq = b.dq(b.add_init(f"{w_name}_quantized", wq), b.add_init(f"{w_name}_scale", scale),
              b.add_init(f"{w_name}_zero_point", np.zeros(w.shape[1], np.int8)), w_name, 1)
    node.input[1] = dq.output[0]
    return dq


def _rewrite(model, plan, weights):
    """`model` with a QDQ pair after every tensor of `plan(graph, initializers)` ({tensor:
    (scale, zero point)}; all readers read the dequantized copy) and the weights each node's
    `weights(node, x_scale, builder)` quantizes (the DQ nodes it returns go before the node)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    b = _Builder(g)
    params = plan(g, b.inits)
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
        nodes += weights(node, x_scale, b)
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

def output_quantum(model, row_std=None):
    """One quantum of the last quantized activation in output units, the largest over the
    outputs. For an output y = W x (+ b) computed by a Gemm/MatMul from a dequantized
    activation x of scale s_x (a CNN's logits): s_x * max_j ||W_j||_2 (W_j: the weights of
    output j). An int8 engine and a float simulation of the same QDQ graph round a few
    requantization ties the other way; the difference cascades through the layers and leaves
    some elements of x whole quanta apart (d_k in {.., -1, 0, 1, ..}). Output j then differs
    by s_x * sum_k W_jk d_k: a sum of random-sign terms, whose size is s_x * ||W_j||_2 * rms(d):
    this unit times rms(d).
    Other outputs follow the same rule through the ops between them and the last quantized
    activations (_quantum): an Add of dequantized tensors (a transformer's residual sum) has
    the larger of their quanta; a LayerNormalization multiplies its input's by max|gamma| /
    std, std the smallest row standard deviation of its input (row_std: {tensor: std}, from
    the calibration batch); Tanh (slope <= 1) and data movement keep it."""
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    producer = {o: n for n in model.graph.node for o in n.output}
    units = []
    for out in model.graph.output:
        unit = _quantum(out.name, producer, inits, row_std or {})
        if unit is None:
            raise ValueError(f"output {out.name} is not computed from a quantized activation")
        units.append(unit)
    return max(units)


# Ops that move or select values (or change them with slope <= 1): an error keeps its size.
_KEEPS_QUANTUM = {"Flatten", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Identity",
                  "Gather", "Tanh", "Relu"}


def _quantum(tensor, producer, inits, row_std):
    """The quantum of `tensor` in its own units (output_quantum); None where it depends on no
    quantized activation (a constant, a graph input)."""
    node = producer.get(tensor)
    if node is None or node.op_type == "Constant":
        return None
    op = node.op_type
    if op == "DequantizeLinear":
        return None if node.input[0] in inits else float(inits[node.input[1]])
    if op in ("Gemm", "MatMul"):
        if op == "Gemm" and any(a.name == "transA" and a.i for a in node.attribute):
            raise ValueError(f"{tensor}: Gemm with transA")
        s_x = _quantum(node.input[0], producer, inits, row_std)
        if s_x is None:
            return None
        w = _constant_matrix(node.input[1], producer, inits)
        trans_b = any(a.name == "transB" and a.i for a in node.attribute)
        per_output = w if trans_b else w.T  # rows: the weights of one output
        return s_x * float(np.linalg.norm(per_output, axis=1).max())
    if op == "LayerNormalization":
        s_x = _quantum(node.input[0], producer, inits, row_std)
        if s_x is None:
            return None
        gamma = _constant(node.input[1], producer, inits)
        return s_x * float(np.abs(gamma).max()) / row_std[node.input[0]]
    if op == "Add":
        units = [u for u in (_quantum(t, producer, inits, row_std) for t in node.input)
                 if u is not None]
        return max(units) if units else None
    if op in _KEEPS_QUANTUM:
        return _quantum(node.input[0], producer, inits, row_std)
    raise ValueError(f"{tensor}: the output quantum through {op} is not defined")


def _constant(tensor, producer, inits):
    """An initializer, directly or through Identity nodes (torch's constant folding shares
    equal LayerNorm weights so)."""
    while tensor not in inits and producer.get(tensor) is not None and \
            producer[tensor].op_type == "Identity":
        tensor = producer[tensor].input[0]
    return inits[tensor].astype(np.float64)


def _constant_matrix(tensor, producer, inits):
    """Weights in float64: an initializer, or the DequantizeLinear of one."""
    if tensor in inits:
        return inits[tensor].astype(np.float64)
    return _dequantized_initializer(_dequantize_node(producer, tensor), inits)


def layernorm_inputs(model):
    """The tensors LayerNormalizations normalize (row_std's `tensors`)."""
    return [n.input[0] for n in model.graph.node if n.op_type == "LayerNormalization"]


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
