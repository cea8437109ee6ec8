// Internal to runtime/cpu: the element-wise kernel's pieces. elementwise_kernel.cc holds the
// kernel (one tiled loop over the output) and its factory, elementwise_program.cc reads a
// node into instructions, elementwise_layout.cc builds the kernel over activations a
// convolution left in its own layout.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "runtime/cpu/build_context.h"
#include "runtime/cpu/elementwise_ops.h"
#include "runtime/cpu/own_kernels.h"

namespace kiln::cpu {

// Elements per tile of a float program.
constexpr int64_t kTile = 256;

struct Operand {
  int slot;
  std::vector<int64_t> strides;  // element strides in the output's index space (0: broadcast)
  bool dense = false;            // laid out exactly like the output (same linear offsets)
  // Set only for an input that is not float32, which the program casts to float before any
  // other use (an attention mask: Cast -> Sub -> Mul), or dequantizes (an 8/16-bit tensor of a
  // QDQ model): it is converted as it is loaded.
  CastFn to_float = nullptr;
  DType dtype = DType::kFloat32;  // the input's type (set with to_float)
  // False for an input no instruction reads as data (the constant scale and zero point of a
  // Q/DQ instruction, which the instruction carries): never loaded.
  bool used = true;
  // > 0: the operand repeats along the innermost dim with this period (a per-channel operand
  // once the spatial dims are merged into the row, MergeSpatialIntoRows); its tile is the
  // period's values repeated, filled once per row. The tile length is a multiple of it.
  int64_t period = 0;
  // Element offset of the operand's first element read (a per-channel operand's slice, read
  // by the program over one piece of a concatenation).
  int64_t base = 0;
};

// Where the kernel writes when the output is not the dense tensor of its iteration shape:
// element strides per iteration dim and the offset of the first (a piece's channel slice of
// a concatenation's output). Empty strides: dense.
struct OutputView {
  std::vector<int64_t> strides;
  int64_t base = 0;
};

// A kernel whose work a caller's parallel region may share out instead of its own Run: the
// pieces of a concatenation's program (elementwise_concat.cc), each too small to be worth a
// region of its own, run in one region with each thread taking its share of every piece.
class SharedKernel : public CpuKernel {
 public:
  // Elements written per run.
  virtual int64_t Work() const = 0;
  // Part `part` of `parts` (part < Shares()), from inside a parallel region; the parts
  // together do what Run does, and no two write the same element.
  virtual void RunShare(const ExecContext& ctx, int part, int parts) = 0;
  // How many parts it may be cut into (the team it was built for).
  virtual int Shares() const = 0;
  // The largest |y| this run wrote, once every part has run, for a kernel that records it
  // (NewElementwiseKernel's `record_bound`); +inf when not recorded or when y holds NaN or
  // an infinity.
  virtual float OutputBound(const ExecContext& ctx) const = 0;
};

// The kernel over `in`, writing slot `out` of `shape` (float32, or the integer type a final
// kQuantize instruction stores), split across the OpenMP team it is built for.
// `record_bound` (float32 outputs read by guarded kernels, BuildContext's `blocked_ok`): each
// tile's largest |y| is taken while the tile is still in cache, and Run records the
// output's for the non-finite guard (nonfinite_guard.h), which then need not scan it.
std::unique_ptr<SharedKernel> NewElementwiseKernel(std::vector<Operand> in,
                                                   std::vector<ew::Instr> prog, int out,
                                                   std::vector<int64_t> shape,
                                                   DType out_dtype = DType::kFloat32,
                                                   OutputView view = {}, bool record_bound = false);

// The instructions of a FusedElementwise node, or of a single element-wise node; nullopt
// when the kernel cannot run it (the reference then does).
std::optional<std::vector<ew::Instr>> ReadInstrs(const Node& node);
// Whether every instruction reading operand k is a Cast (to float) or a DequantizeLinear.
bool OnlyConvertingReads(const std::vector<ew::Instr>& prog, int k);
// Whether any instruction reads operand k as data.
bool ReadsOperand(const std::vector<ew::Instr>& prog, int k);

// The float program in the channels-last or blocked layout a convolution left its input in;
// null when the node's operands are not that layout's shapes.
std::unique_ptr<CpuKernel> MakeLayoutElementwise(BuildContext& ctx, const Node& node,
                                                 const std::vector<ew::Instr>& prog, int out);
// An operand's shape padded to y's rank when it is [N or 1, C or 1, 1, ...] against `y`: a
// per-channel (or per-image, or scalar) operand; nullopt otherwise.
std::optional<std::vector<int64_t>> PerChannel(std::vector<int64_t> s,
                                               const std::vector<int64_t>& y);
// A program whose operand 0 concatenates its first inputs (`concat_inputs`,
// elementwise_concat.cc): a kernel per piece writing the output's channel slices.
std::unique_ptr<CpuKernel> MakeConcatProgram(BuildContext& ctx, const Node& node);
// The QDQ program on the flat buffers of one shared unpadded layout; null when its inputs are
// not in one.
std::unique_ptr<CpuKernel> MakeSameLayoutQuantized(BuildContext& ctx, const Node& node,
                                                   const std::vector<ew::Instr>& prog, int out,
                                                   DType out_dtype);

}  // namespace kiln::cpu
