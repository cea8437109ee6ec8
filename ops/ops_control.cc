// Control flow: If, Loop, Scan. The bodies run on the interpreter itself (RunBody), reading
// the enclosing graph's values through the node's captures (its last inputs). Loop-carried
// and scan values are whole tensors; scan outputs are stacked along their axis.
#include <algorithm>
#include <cstring>

#include "base/stop.h"
#include "ops/interpreter.h"
#include "ops/kernel_util.h"

namespace kiln::ref {
namespace {

// A loop without a trip count or condition that never ends is a model error, not a hang.
constexpr int64_t kMaxIterations = int64_t{1} << 24;

size_t ExplicitInputs(const Node& n) { return n.inputs.size() - n.captures.size(); }

TensorMap Captured(const Node& n, const KernelInputs& in) {
  TensorMap m;
  const size_t first = ExplicitInputs(n);
  for (size_t i = 0; i < n.captures.size(); ++i) {
    if (in[first + i]) m[n.captures[i]] = *in[first + i];
  }
  return m;
}

const Graph* Body(const Node& n, const char* name) {
  const Attribute* a = n.FindAttr(name);
  return a && a->kind == Attribute::Kind::kGraph ? a->g.get() : nullptr;
}

absl::StatusOr<bool> ScalarBool(const Node& n, const Tensor& t, const char* what) {
  if (t.numel() != 1) return InvalidInput(n, std::string(what) + " must hold one element");
  return t.GetDouble(0) != 0.0;
}

// Element (outer, index, inner) addressing along `axis`: the slice at `index`, axis removed.
absl::StatusOr<Tensor> SliceAlong(const Node& n, const Tensor& t, int64_t axis, int64_t index) {
  if (DTypeSize(t.dtype()) == 0) return InvalidInput(n, "scan inputs must be numeric tensors");
  std::vector<int64_t> shape = t.shape();
  int64_t outer = 1, inner = static_cast<int64_t>(DTypeSize(t.dtype()));
  for (int64_t d = 0; d < axis; ++d) outer *= shape[d];
  for (size_t d = axis + 1; d < shape.size(); ++d) inner *= shape[d];
  const int64_t len = shape[axis];
  shape.erase(shape.begin() + axis);
  Tensor out(t.dtype(), shape);
  for (int64_t o = 0; o < outer; ++o) {
    std::memcpy(static_cast<char*>(out.raw_mutable()) + o * inner,
                static_cast<const char*>(t.raw()) + (o * len + index) * inner, inner);
  }
  return out;
}

// Stacks same-shaped parts along a new `axis`.
absl::StatusOr<Tensor> StackAlong(const Node& n, const std::vector<Tensor>& parts, int64_t axis,
                                  const std::vector<int64_t>& part_shape, DType dtype) {
  if (DTypeSize(dtype) == 0) return InvalidInput(n, "scan outputs must be numeric tensors");
  std::vector<int64_t> shape = part_shape;
  shape.insert(shape.begin() + axis, static_cast<int64_t>(parts.size()));
  int64_t outer = 1, inner = static_cast<int64_t>(DTypeSize(dtype));
  for (int64_t d = 0; d < axis; ++d) outer *= part_shape[d];
  for (size_t d = axis; d < part_shape.size(); ++d) inner *= part_shape[d];
  Tensor out(dtype, shape);
  const int64_t k = static_cast<int64_t>(parts.size());
  for (int64_t i = 0; i < k; ++i) {
    if (parts[i].shape() != part_shape || parts[i].dtype() != dtype) {
      return InvalidInput(n, "the body's scan output changes shape or type between iterations");
    }
    for (int64_t o = 0; o < outer; ++o) {
      std::memcpy(static_cast<char*>(out.raw_mutable()) + (o * k + i) * inner,
                  static_cast<const char*>(parts[i].raw()) + o * inner, inner);
    }
  }
  return out;
}

absl::StatusOr<std::vector<Tensor>> If(const Node& n, const KernelInputs& in) {
  ASSIGN_OR_RETURN(const Tensor* cond, RequireInput(n, in, 0));
  ASSIGN_OR_RETURN(bool taken, ScalarBool(n, *cond, "cond"));
  const Graph* body = Body(n, taken ? "then_branch" : "else_branch");
  if (!body) return InvalidInput(n, "a branch is missing");
  ASSIGN_OR_RETURN(std::vector<Tensor> outs, RunBody(*body, {}, Captured(n, in)));
  if (outs.size() != n.outputs.size()) {
    return InvalidInput(n, "the branch produces " + std::to_string(outs.size()) +
                               " outputs, the node " + std::to_string(n.outputs.size()));
  }
  return outs;
}

// The body's scan outputs of every iteration, stacked (an empty loop gives [0] + the
// declared shape where the body declares one).
absl::StatusOr<Tensor> StackScan(const Node& n, const Graph& body, size_t out_index,
                                 const std::vector<Tensor>& parts) {
  if (!parts.empty()) return StackAlong(n, parts, 0, parts[0].shape(), parts[0].dtype());
  const Value* v = body.outputs[out_index];
  std::vector<int64_t> shape = {0};
  if (v->shape && IsStatic(*v->shape)) {
    for (int64_t d : StaticDims(*v->shape)) shape.push_back(d);
  }
  return Tensor(v->dtype == DType::kUndefined ? DType::kFloat32 : v->dtype, shape);
}

absl::StatusOr<std::vector<Tensor>> Loop(const Node& n, const KernelInputs& in) {
  const Graph* body = Body(n, "body");
  if (!body) return InvalidInput(n, "the body is missing");
  const size_t explicit_in = ExplicitInputs(n);
  if (explicit_in < 2) return InvalidInput(n, "Loop takes M and cond before its carried values");
  const size_t carried = explicit_in - 2;
  if (body->outputs.size() < 1 + carried || n.outputs.size() != body->outputs.size() - 1) {
    return InvalidInput(n, "the body's outputs do not match the node's");
  }
  int64_t trips = kMaxIterations;
  if (in[0]) trips = std::max<int64_t>(0, in[0]->GetInt(0));
  bool keep = true;
  if (in[1]) {
    ASSIGN_OR_RETURN(keep, ScalarBool(n, *in[1], "cond"));
  }
  std::vector<Tensor> state;
  for (size_t i = 0; i < carried; ++i) {
    if (!in[2 + i]) return InvalidInput(n, "a loop-carried initial value is missing");
    state.push_back(*in[2 + i]);
  }
  const TensorMap captured = Captured(n, in);
  const size_t scans = body->outputs.size() - 1 - carried;
  std::vector<std::vector<Tensor>> scanned(scans);
  int64_t i = 0;
  for (; i < trips && keep; ++i) {
    if (i >= kMaxIterations) return InvalidInput(n, "the loop runs past 2^24 iterations");
    RETURN_IF_ERROR(CheckStop());
    std::vector<Tensor> args = {Tensor::FromInt64({i}, {}), Tensor::Scalar(DType::kBool, keep)};
    args.insert(args.end(), state.begin(), state.end());
    ASSIGN_OR_RETURN(std::vector<Tensor> outs, RunBody(*body, args, captured));
    ASSIGN_OR_RETURN(keep, ScalarBool(n, outs[0], "the body's condition"));
    for (size_t k = 0; k < carried; ++k) state[k] = std::move(outs[1 + k]);
    for (size_t k = 0; k < scans; ++k) scanned[k].push_back(std::move(outs[1 + carried + k]));
  }
  std::vector<Tensor> result = std::move(state);
  for (size_t k = 0; k < scans; ++k) {
    ASSIGN_OR_RETURN(Tensor t, StackScan(n, *body, 1 + carried + k, scanned[k]));
    result.push_back(std::move(t));
  }
  return result;
}

int64_t NormalizeAxis(int64_t axis, int64_t rank) { return axis < 0 ? axis + rank : axis; }

struct ScanSpec {
  int64_t states = 0, inputs = 0, outputs = 0;
  std::vector<int64_t> in_axes, in_dirs, out_axes, out_dirs;
};

absl::StatusOr<ScanSpec> ReadScan(const Node& n, const Graph& body) {
  ScanSpec s;
  s.inputs = n.GetInt("num_scan_inputs", 0);
  const int64_t total = static_cast<int64_t>(ExplicitInputs(n));
  if (s.inputs < 1 || s.inputs > total) return InvalidInput(n, "num_scan_inputs is out of range");
  s.states = total - s.inputs;
  s.outputs = static_cast<int64_t>(body.outputs.size()) - s.states;
  if (s.outputs < 0 || static_cast<int64_t>(n.outputs.size()) != s.states + s.outputs) {
    return InvalidInput(n, "the body's outputs do not match the node's");
  }
  s.in_axes = n.GetInts("scan_input_axes", std::vector<int64_t>(s.inputs, 0));
  s.in_dirs = n.GetInts("scan_input_directions", std::vector<int64_t>(s.inputs, 0));
  s.out_axes = n.GetInts("scan_output_axes", std::vector<int64_t>(s.outputs, 0));
  s.out_dirs = n.GetInts("scan_output_directions", std::vector<int64_t>(s.outputs, 0));
  if (static_cast<int64_t>(s.in_axes.size()) != s.inputs ||
      static_cast<int64_t>(s.in_dirs.size()) != s.inputs ||
      static_cast<int64_t>(s.out_axes.size()) != s.outputs ||
      static_cast<int64_t>(s.out_dirs.size()) != s.outputs) {
    return InvalidInput(n, "scan axes/directions do not match the scan inputs and outputs");
  }
  return s;
}

// One scan (opset 9+ form) over `scan_in` (the scan inputs) from `state`.
absl::StatusOr<std::vector<Tensor>> ScanOnce(const Node& n, const Graph& body, const ScanSpec& s,
                                             std::vector<Tensor> state,
                                             const std::vector<const Tensor*>& scan_in,
                                             const TensorMap& captured) {
  int64_t len = -1;
  std::vector<int64_t> axes;
  for (int64_t j = 0; j < s.inputs; ++j) {
    const int64_t axis = NormalizeAxis(s.in_axes[j], scan_in[j]->rank());
    if (axis < 0 || axis >= scan_in[j]->rank())
      return InvalidInput(n, "a scan axis is out of range");
    if (len >= 0 && scan_in[j]->dim(axis) != len) {
      return InvalidInput(n, "the scan inputs differ in length");
    }
    len = scan_in[j]->dim(axis);
    axes.push_back(axis);
  }
  std::vector<std::vector<Tensor>> parts(s.outputs);
  for (int64_t t = 0; t < len; ++t) {
    RETURN_IF_ERROR(CheckStop());
    std::vector<Tensor> args = state;
    for (int64_t j = 0; j < s.inputs; ++j) {
      const int64_t at = s.in_dirs[j] ? len - 1 - t : t;
      ASSIGN_OR_RETURN(Tensor slice, SliceAlong(n, *scan_in[j], axes[j], at));
      args.push_back(std::move(slice));
    }
    ASSIGN_OR_RETURN(std::vector<Tensor> outs, RunBody(body, args, captured));
    for (int64_t k = 0; k < s.states; ++k) state[k] = std::move(outs[k]);
    for (int64_t k = 0; k < s.outputs; ++k) parts[k].push_back(std::move(outs[s.states + k]));
  }
  std::vector<Tensor> result = std::move(state);
  for (int64_t k = 0; k < s.outputs; ++k) {
    if (s.out_dirs[k]) std::reverse(parts[k].begin(), parts[k].end());
    if (parts[k].empty()) return InvalidInput(n, "a scan over zero steps has no output shape");
    const int64_t axis = NormalizeAxis(s.out_axes[k], parts[k][0].rank() + 1);
    if (axis < 0 || axis > parts[k][0].rank())
      return InvalidInput(n, "a scan output axis is out of range");
    ASSIGN_OR_RETURN(Tensor st,
                     StackAlong(n, parts[k], axis, parts[k][0].shape(), parts[k][0].dtype()));
    result.push_back(std::move(st));
  }
  return result;
}

absl::StatusOr<std::vector<Tensor>> Scan(const Node& n, const KernelInputs& in) {
  const Graph* body = Body(n, "body");
  if (!body) return InvalidInput(n, "the body is missing");
  if (n.opset < 9) return absl::UnimplementedError(n.Describe() + ": Scan before opset 9");
  ASSIGN_OR_RETURN(ScanSpec s, ReadScan(n, *body));
  std::vector<Tensor> state;
  std::vector<const Tensor*> scan_in;
  for (int64_t i = 0; i < s.states + s.inputs; ++i) {
    ASSIGN_OR_RETURN(const Tensor* t, RequireInput(n, in, i));
    if (i < s.states) {
      state.push_back(*t);
    } else {
      scan_in.push_back(t);
    }
  }
  return ScanOnce(n, *body, s, std::move(state), scan_in, Captured(n, in));
}

}  // namespace

void RegisterControlFlowKernels(KernelRegistry& r) {
  r.Register(kOnnxDomain, "If", If);
  r.Register(kOnnxDomain, "Loop", Loop);
  r.Register(kOnnxDomain, "Scan", Scan);
}

}  // namespace kiln::ref
