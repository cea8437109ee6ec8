// The reference interpreter's kernel table. A kernel computes a node's outputs from its
// input tensors, straightforwardly (clarity over speed; long reductions accumulate in
// double). Registration is explicit: each ops_*.cc exposes one Register*Kernels function and
// registry.cc lists them; there is no static self-registration.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "ir/graph.h"

namespace kiln::ref {

// One entry per node input, in order; nullptr where an optional input is omitted.
using KernelInputs = std::vector<const Tensor*>;
// Returns one tensor per node output (an undefined Tensor for an omitted output).
using KernelFn =
    std::function<absl::StatusOr<std::vector<Tensor>>(const Node&, const KernelInputs&)>;

class KernelRegistry {
 public:
  void Register(const std::string& domain, const std::string& op_type, KernelFn fn);
  const KernelFn* Find(const std::string& domain, const std::string& op_type) const;
  std::vector<std::string> OpTypes(const std::string& domain) const;
  // The full table, built once on first use.
  static const KernelRegistry& Default();

 private:
  std::map<std::pair<std::string, std::string>, KernelFn> kernels_;
};

// One function per operator family; registry.cc calls them all.
void RegisterElementwiseKernels(KernelRegistry& r);  // unary, activations, binary, variadic
void RegisterNnKernels(KernelRegistry& r);           // conv, pools, norms, gemm, softmax...
void RegisterReductionKernels(KernelRegistry& r);    // Reduce*, Arg*, CumSum, TopK, gather/
                                                     // scatter, OneHot, Trilu, EyeLike, Range
void RegisterTensorKernels(KernelRegistry& r);       // shape, layout, cast, resize...
void RegisterKilnKernels(KernelRegistry& r);         // ai.kiln fused operators
void RegisterControlFlowKernels(KernelRegistry& r);  // If, Loop, Scan (ops_control.cc)

}  // namespace kiln::ref
