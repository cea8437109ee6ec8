// Test support: generated CUDA kernels compiled for the host (kiln_host_shim.h) with the
// project's C++ compiler, loaded with dlopen and launched on host tensors, so the code
// generator's output is checked against the reference interpreter on a machine without a GPU.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "compiler/codegen/cuda_kernel.h"
#include "ir/graph.h"

namespace kiln::testing {

class HostModule {
 public:
  ~HostModule();
  // Compiles the kernels into one shared object under `dir` (reused when a module with the
  // same source was compiled before).
  static absl::StatusOr<std::unique_ptr<HostModule>> Compile(
      const std::vector<codegen::Kernel>& kernels, const std::string& dir);
  // Runs kernel `k` (compiled in this module) with one pointer per parameter.
  absl::Status Launch(const codegen::Kernel& k, const std::vector<void*>& args) const;

 private:
  void* handle_ = nullptr;
  int (*launch_)(void (*)(void* const*), void* const*, unsigned, unsigned, int) = nullptr;
};

// Runs a node's kernels in order on host tensors: inputs by node input index (nullptr where
// omitted); outputs by node output index, allocated from the node's static output shapes
// where undefined.
absl::Status RunNodeKernels(const HostModule& m, const std::vector<codegen::Kernel>& kernels,
                            const Node& node, const std::vector<const Tensor*>& inputs,
                            std::vector<Tensor>& outputs);

// Where test modules are compiled: $KILN_HOST_KERNEL_DIR, else a folder in the build tree.
std::string HostKernelDir();

}  // namespace kiln::testing
