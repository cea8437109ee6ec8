// The CUDA backend: an Engine built from a CompiledGraph for one batch size on one GPU.
// Convolutions run on cuDNN (fused bias/ReLU/residual call where the epilogue allows), matrix
// products on cuBLASLt (bias/ReLU/GELU epilogues), every other op the code generator takes
// (compiler/codegen: FusedElementwise programs, softmax, LayerNorm, reductions, pools, data
// movement) as kernels compiled with NVRTC at build, the rest on the reference interpreter
// through a host callback (counted as fallback ops). Activations live in one device arena
// laid out by the memory plan; weights are uploaded once; inputs and outputs pass through
// pinned staging buffers; each engine has its own stream, and the whole Run is captured once
// as a CUDA graph and replayed. fp32 throughout; TF32 only when asked for.
//
// Run is not reentrant (one call at a time per engine, as for the CPU engine).
//
// This header is dependency-light on purpose: the CUDA headers appear only in
// runtime/cuda/*.cc, and a build without the CUDA toolkit links a stub whose BuildCudaEngine
// answers UNIMPLEMENTED.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"
#include "compiler/compile.h"
#include "runtime/engine.h"

namespace kiln::cuda {

struct CudaEngineOptions {
  int device = 0;
  // TF32 tensor cores for fp32 convolutions and products: faster on Ampere and later, but
  // results move by ~1e-3 relative, so only ever on when asked for.
  bool tf32 = false;
  bool cuda_graph = true;  // capture Run once and replay it
  bool warm_up = true;
  // Let cuDNN's fused call / cuBLASLt's epilogue apply ReLU (and cuBLASLt GELU-tanh); off
  // runs every activation in the generated epilogue kernels.
  bool fuse_activations = true;
  // Debugging a device fault: no graph, a synchronisation after every step, and an error
  // that names the failing step's node. Also on when the environment has KILN_CUDA_DEBUG=1.
  bool debug_sync = false;
  // Convolution algorithms chosen by an earlier build of this engine (EngineInfo::layout,
  // "cudnn-algos:..."), reused instead of measured; "" or anything else measures.
  std::string tuning;
};

// Whether this build has the CUDA backend (the toolkit was found at configure time).
bool CudaCompiledIn();

// "cuda" -> 0, "cuda:N" -> N; nullopt for anything else (the server's device names).
std::optional<int> ParseCudaDevice(const std::string& device);

// Whether an error message (a CudaStatus message names the error) reports a sticky CUDA
// error: an illegal address, a kernel fault, a trap. The process's context is then lost and
// every later CUDA call fails, so a tool running many tests should stop and say so.
bool IsStickyCudaError(std::string_view message);

// The engine keeps its own clone of the graph (constants shared). FAILED_PRECONDITION when
// the device is not usable (no driver, no such GPU), with the reason; UNIMPLEMENTED in a
// build without CUDA.
absl::StatusOr<std::unique_ptr<runtime::Engine>> BuildCudaEngine(const CompiledGraph& compiled,
                                                                  const CudaEngineOptions& options = {});

}  // namespace kiln::cuda
