// The one interface every backend implements. An Engine is built from a compiled graph
// (optimized for one batch size, with its memory plan) for one device, and then runs that
// graph many times. Steady state allocates nothing: the caller passes output tensors that
// the engine fills (allocated once, by the engine, on the first call when they are empty).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "compiler/compile.h"
#include "ir/tensor.h"

namespace kiln::runtime {

struct TensorSpec {
  std::string name;
  DType dtype = DType::kUndefined;
  // Static: an engine serves one batch size. -1: a dim known only per run (a CPU engine
  // built with dynamic_shapes, runtime/dynamic_engine.h).
  std::vector<int64_t> shape;
};

struct EngineInfo {
  std::string device;          // "cpu", "cuda:0"
  int64_t batch = 1;
  int64_t arena_bytes = 0;     // activation arena (memory plan)
  int64_t weight_bytes = 0;    // weights after prepacking
  // Of weight_bytes, those packed once for several engines (cpu: a model's batch buckets and
  // instances share each prepacked weight): held by this engine, not allocated for it.
  int64_t shared_weight_bytes = 0;
  double build_ms = 0.0;       // primitive creation, weight reorders, warm-up
  int total_ops = 0;
  int fallback_ops = 0;        // ops running on reference kernels (correct, slow)
  std::vector<std::string> fallback_op_types;
  // Ops on a library's reference implementation (oneDNN's "ref:any": correct, very slow),
  // "Type (implementation)" each. A hot op here is a performance bug on this CPU.
  std::vector<std::string> slow_ops;
  int layout_reorders = 0;     // cpu: kernels that only change a tensor's layout, per run
  int bf16_ops = 0;            // products computed in bfloat16 (kiln_precision, kiln_ops.h)
  int winograd_ops = 0;        // cpu: convolutions on a Winograd kernel (CpuEngineOptions)
  int free_transposes = 0;     // cpu: Transposes that only relabel a layout (run nothing)
  int activations_after = 0;   // cpu: convolutions whose activations run after the primitive
  double trial_ms = 0;  // cpu: build time spent timing kernel choices (its own, not remembered)
  int int8_ops = 0;     // products computed on integers (QLinearConv, QLinearMatMul)
  int build_time_evaluated = 0;  // nodes with constant inputs computed once at build
  std::string isa;             // cpu: the vector ISA the kernels run ("avx512", "avx2 (oneDNN avx2)")
  std::string layout;          // backend-specific layout choice ("blocked", "primitive", ...)
  double tune_ms = 0.0;        // time spent choosing it by measurement (0: not tuned)
  int threads = 0;             // intra-op threads a run uses (0: not applicable)
  // The most a run may widen to inside a runtime::ScopedRunWidth (run_width.h): more than
  // `threads` only for an engine built wider than its default run (BuildOptions::run_threads).
  int max_threads = 0;
};

// INVALID_ARGUMENT unless `tensors` match `specs` one for one in dtype and shape; `role`
// names them in the message ("input", "output"), `why` (optional) says who needs it.
inline absl::Status CheckTensors(const std::vector<TensorSpec>& specs,
                                 const std::vector<Tensor>& tensors, const std::string& role,
                                 const std::string& why = "") {
  const std::string because = why.empty() ? "" : " (" + why + ")";
  if (tensors.size() != specs.size()) {
    return absl::InvalidArgumentError("expected " + std::to_string(specs.size()) + " " + role +
                                      "s, got " + std::to_string(tensors.size()) + because);
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorSpec& spec = specs[i];
    if (tensors[i].dtype() != spec.dtype || tensors[i].shape() != spec.shape) {
      return absl::InvalidArgumentError(role + " '" + spec.name + "': expected " +
                                        DTypeName(spec.dtype) + " " + ShapeToString(spec.shape) +
                                        ", got " + DTypeName(tensors[i].dtype()) + " " +
                                        ShapeToString(tensors[i].shape()) + because);
    }
  }
  return absl::OkStatus();
}

// What every engine's Run requires of its inputs.
inline absl::Status CheckInputs(const std::vector<TensorSpec>& specs,
                                const std::vector<Tensor>& inputs) {
  return CheckTensors(specs, inputs, "input");
}

// A graph output that a Concat makes of a graph input followed by other values along one
// axis, the input read by nothing else: a decoder's `present = Concat(past, new)` along the
// cache's length. Indices into inputs() and outputs().
struct InPlaceAppend {
  size_t input = 0;
  size_t output = 0;
};

class Engine {
 public:
  virtual ~Engine() = default;
  virtual const EngineInfo& info() const = 0;
  virtual const std::vector<TensorSpec>& inputs() const = 0;
  virtual const std::vector<TensorSpec>& outputs() const = 0;
  // inputs: one tensor per input spec, in order, dtype and shape exactly as specified
  // (INVALID_ARGUMENT otherwise). outputs: resized to one per output spec; tensors already of
  // the right dtype and shape are written in place (no allocation).
  virtual absl::Status Run(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) = 0;

  // The outputs RunAppending takes with their input already in place (empty: none).
  virtual std::vector<InPlaceAppend> in_place_appends() const { return {}; }
  // Run, except that every in_place_appends() output passed in already holds its input's
  // values where the Concat puts them (the front of each block along the axis): the engine
  // writes only what follows and never reads those inputs, whose tensors need only the right
  // dtype and shape. A generation loop keeps its key/value cache in the outputs this way
  // instead of copying the whole past in and out at every token. Every output must be passed
  // in at its dtype and shape (INVALID_ARGUMENT otherwise: a new tensor would not hold the
  // input); FAILED_PRECONDITION from an engine with no in-place appends.
  virtual absl::Status RunAppending(const std::vector<Tensor>& inputs,
                                    std::vector<Tensor>& outputs) {
    (void)inputs;
    (void)outputs;
    return absl::FailedPreconditionError("this engine does not append in place");
  }
};

}  // namespace kiln::runtime
