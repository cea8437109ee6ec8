// A generated CUDA kernel and the module it is compiled in.
//
// The emitters (compiler/codegen/*_emitter.h) turn one IR node into CUDA C source. Engines
// serve static shapes, so every size, stride and attribute is baked into the source and a
// kernel takes only pointers: its parameters bind to the node's inputs and outputs, in the
// order `params` lists them. The source uses a deliberately small dialect, which lets the
// same text compile with NVRTC for the device and with the host compiler through a shim
// (grid and block indices as loops, __syncthreads as a fiber switch) for tests:
//   - `extern "C" __global__` functions, 1-D grids and blocks (blockIdx.x, threadIdx.x,
//     blockDim.x, gridDim.x), block-level `__shared__` arrays of static size, __syncthreads;
//   - builtin types only (no <cstdint>), the C math functions (expf, erff, ...), and the
//     helpers of Prelude() (kiln_max, kiln_block_sum, ...);
//   - no warp intrinsics, atomics or dynamic shared memory.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "ir/dtype.h"

namespace kiln::codegen {

// Parameter k of a kernel is named p<k> in its source.
struct KernelParam {
  enum class Kind { kInput, kOutput };
  Kind kind = Kind::kInput;
  int index = 0;  // the node's input or output index
  bool operator==(const KernelParam& o) const { return kind == o.kind && index == o.index; }
};

struct Kernel {
  std::string name;    // the extern "C" symbol, unique within a module
  std::string source;  // the __global__ function
  std::vector<KernelParam> params;
  std::vector<std::string> param_types;  // element C type per parameter (set by KernelSignature)
  int64_t grid = 1;    // blocks (1-D)
  int block = 256;     // threads per block (1-D)
  bool uses_barrier = false;  // calls __syncthreads (every thread of a block must reach it)
};

// The device helpers every module starts with.
const std::string& Prelude();
// One translation unit: the prelude, then the kernels in order.
std::string ModuleSource(const std::vector<Kernel>& kernels);

// A C identifier made from `s` (other characters become '_'; never starts with a digit).
std::string Identifier(const std::string& s);
// A float literal that reads back as exactly `v` (hex float; infinities and NaN by bit pattern).
std::string FloatLiteral(float v);
// An integer literal of type long long.
std::string IntLiteral(int64_t v);
// The C type that holds one element of `t` in a kernel; "" when kernels do not handle it.
std::string CType(DType t);
// The unsigned type of an element of `bytes` bytes (1, 2, 4, 8) for pure data movement; "" else.
std::string WordType(size_t bytes);

// Blocks for a grid-stride loop over `elements` with `block` threads: enough to cover the
// elements, capped so huge tensors loop rather than launch millions of blocks.
int64_t GridFor(int64_t elements, int block);
// The block size of a per-row (block-per-row) reduction over `len` elements: a power of two
// in [32, 256].
int ReductionBlock(int64_t len);

// Appends lines with indentation; the emitters' only formatting tool.
class SourceWriter {
 public:
  void Line(const std::string& text);
  void Open(const std::string& text);   // Line(text + " {") and indent
  void Close(const std::string& tail = "");  // dedent and "}" + tail
  const std::string& str() const { return out_; }

 private:
  std::string out_;
  int depth_ = 0;
};

// A parameter list: "const float* p0, float* p1" for the params and element C types given
// (inputs are const).
std::string ParamList(const std::vector<KernelParam>& params, const std::vector<std::string>& ctypes);
// "extern "C" __global__ void __launch_bounds__(B) NAME(PARAMS)"; records the types in
// k.param_types.
std::string KernelSignature(Kernel& k, const std::vector<std::string>& ctypes);

}  // namespace kiln::codegen
