// Internal to runtime/cpu (includes oneDNN): the state shared by the engine and the kernel
// factories while an engine is built, and the kernel interface used at run time.
//
// Every value and every scratch buffer is a *slot*; at run time a kernel finds its data in
// `ptrs[slot]`, a table the engine fills once at build (arena, blocked arena, constants) and
// per Run (graph inputs and outputs). Kernels hold slot numbers, never pointers, so binding
// the caller's tensors costs a few stores and no allocation.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "compiler/plan/buffer_assign.h"
#include "compiler/plan/memory_plan.h"
#include "ir/graph.h"
#include "oneapi/dnnl/dnnl.hpp"
#include "runtime/cpu/cpu_engine.h"
#include "runtime/cpu/nonfinite_guard.h"

namespace kiln::cpu {

enum class Storage {
  kInput,         // the caller's input tensor
  kOutput,        // the caller's output tensor
  kConstant,      // the graph's constant
  kArena,         // the memory plan's arena, plain layout
  kBlocked,       // the blocked arena: a primitive-chosen layout, or a kernel temp
  kExternalView,  // shares `root`'s pointer (a view of an input, output or constant)
  kScratchpad,    // oneDNN's shared scratchpad
};

struct Slot {
  std::string name;
  DType dtype = DType::kUndefined;
  std::vector<int64_t> shape;
  Storage storage = Storage::kArena;
  dnnl::memory::desc md;      // storage layout when not plain (zero desc: plain)
  bool blocked_ok = false;    // every consumer reads it through a conv-family primitive
  int64_t offset = -1;        // kArena
  int request = -1;           // kBlocked: index into BuildContext::requests
  int root = -1;              // kExternalView
  int64_t last_step = -1;     // last consuming step (blocked lifetimes)
  bool is_plain() const { return md.is_zero(); }
};

struct ExecContext {
  void* const* ptrs = nullptr;
  dnnl::stream* stream = nullptr;
  FiniteBounds* bounds = nullptr;  // what this run knows about finiteness (nonfinite_guard.h)
  // Engine::RunAppending: the appending Concats' first inputs are already in their outputs.
  bool append_in_place = false;
};

class CpuKernel {
 public:
  virtual ~CpuKernel() = default;
  virtual absl::Status Run(const ExecContext& ctx) = 0;
  virtual bool is_fallback() const { return false; }
  // Whether a run may use fewer threads than the engine was built with: the kernel splits
  // its work by the calling thread's OpenMP team at run time (ForEachChunk), never by the
  // build's. False for oneDNN primitives (a JIT kernel partitions its work for the team it
  // was created with and forks that many threads however few the caller allows), and the
  // default, so a kernel nobody marked is never run narrower than it was built.
  virtual bool follows_team() const { return false; }
};

using KernelList = std::vector<std::unique_ptr<CpuKernel>>;

struct BuildContext {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  std::vector<Slot> slots;
  std::unordered_map<std::string, int> slot_of;  // value name -> slot
  std::vector<plan::BufferRequest> requests;      // blocked arena
  // kPrimitive or kBlocked (never kTune: the tuner builds one engine per concrete choice).
  ActivationLayout layout = ActivationLayout::kPrimitive;
  // 3x3 convolutions may run oneDNN's Winograd kernel where its heuristic picks it or where
  // timed faster (dnnl_conv.cc); off: direct convolution only.
  bool winograd = true;
  // The engine is built wider than its runs' default team (CpuEngineOptions::run_threads):
  // products oneDNN's matmul could take run on Kiln's GEMM instead, which splits its work by
  // the team of each run (oneDNN's partitions for the team it was created with).
  bool follow_team = false;
  // Build time left for timing a Winograd kernel against the direct one where oneDNN's
  // heuristic did not pick it (primitive_timing.h); 0: the heuristic alone.
  double trial_ms_left = 0;
  int scratch_slot = -1;
  int64_t scratchpad_bytes = 0;
  int64_t weight_bytes = 0;
  int64_t shared_weight_bytes = 0;  // of weight_bytes, packed by another engine (SharedPacks)
  // Prepacked constants this engine uses, possibly shared with other engines (see
  // PrepackConstant): kept alive as long as the engine is.
  std::vector<std::shared_ptr<void>> packed_weights;
  int64_t step = 0;       // the node being built
  KernelList* pre = nullptr;   // kernels to run before the node's kernel (reorders)
  KernelList* post = nullptr;  // kernels to run after it

  // Ops whose oneDNN primitive is a reference implementation (correct, very slow): reported
  // in EngineInfo like fallback ops. "Type (impl)" per op.
  std::vector<std::string> slow_ops;
  int bf16_ops = 0;  // products built with bfloat16 operands
  int winograd_ops = 0;       // convolutions on oneDNN's Winograd kernel
  int free_transposes = 0;    // Transposes sharing their input's bytes (layout_transpose.h)
  int activations_after = 0;  // convolutions whose activations run after the primitive
  // Slots of graph inputs that one node reads and no output repeats (in_place_append.h): a
  // Concat whose first input is one of them and whose output is the caller's tensor can take
  // that input as already in place. The (input slot, output slot) pairs it took are `appends`.
  std::vector<int> sole_read_inputs;
  std::vector<std::pair<int, int>> appends;

  int SlotOf(const Value* v) const;
  // Records a slow implementation for the node being built (see slow_ops).
  void NoteImplementation(const Node& node, const std::string& impl);
  // A temp buffer of the blocked arena, live during the current step only.
  int AddTemp(const dnnl::memory::desc& md);
  // The plain (row-major) desc of a slot's shape, in its dtype (f32, u8, s8, s32; f32 for
  // the dtypes oneDNN has no type for).
  dnnl::memory::desc PlainMd(int slot) const;
  // The desc the slot is stored in (plain or blocked).
  dnnl::memory::desc StoredMd(int slot) const;
  // Records a primitive's scratchpad need (user mode: one shared buffer).
  void NoteScratchpad(const dnnl::memory::desc& scratch);
  // Makes `slot` readable as `want`: itself when stored so, else a temp filled by a reorder
  // queued in `pre`.
  int ReadAs(int slot, const dnnl::memory::desc& want);
  // Where a primitive whose dst desc is `got` should write `out`: `out` itself when it may be
  // stored so (its storage becomes `got`), else a temp reordered into `out` by a `post` kernel.
  int WriteAs(int out, const dnnl::memory::desc& got);
  // Lets `out` take over the blocked buffer of `in` when `in` is stored as `md` and dies at
  // this step (the residual of a sum post-op: then no copy is needed). The caller makes sure
  // the primitive does not also read `in` as another operand.
  bool ShareDyingInput(int in, int out, const dnnl::memory::desc& md);
};

// Runs a oneDNN primitive over slots without allocating: the exec-arg array is built once.
class DnnlCall {
 public:
  DnnlCall() = default;
  DnnlCall(dnnl::primitive prim) : prim_(std::move(prim)) {}
  // Binds argument `arg` to a slot (re-pointed every run).
  void Arg(int arg, const dnnl::memory::desc& md, int slot, const dnnl::engine& eng);
  // Binds argument `arg` to memory owned by the call (weights, bias).
  void Owned(int arg, const dnnl::memory& mem);
  absl::Status Execute(const ExecContext& ctx);

 private:
  dnnl::primitive prim_;
  std::vector<dnnl::memory> mems_;
  std::vector<int> slots_;  // -1 for owned memory
  std::vector<dnnl_exec_arg_t> args_;
};

// A reorder between two descs of the same logical tensor, as a kernel.
std::unique_ptr<CpuKernel> MakeReorder(BuildContext& ctx, int src, const dnnl::memory::desc& src_md,
                                       int dst, const dnnl::memory::desc& dst_md);

// Copies a constant tensor (reordered from its plain desc) into memory of desc `want`. The
// packed copy is shared between engines of this process that pack the same constant (same
// buffer, still alive) into the same desc: a model's batch buckets and instances, built from
// one graph or from the engine cache's mapped blobs, keep one copy of each weight.
absl::StatusOr<dnnl::memory> PrepackConstant(BuildContext& ctx, const Tensor& t,
                                             const dnnl::memory::desc& plain,
                                             const dnnl::memory::desc& want);

// The engine's packed copy of constant `t`: `pack` fills `bytes` bytes (64-byte aligned), or
// another engine's copy of the same buffer (still alive) packed the same way is taken.
// `layout` must name everything besides t's buffer that decides the packed bytes. The bytes
// count in ctx.weight_bytes (and shared_weight_bytes when taken); ctx.packed_weights keeps
// the copy alive with the engine. PrepackConstant is this with oneDNN's reorder.
std::shared_ptr<void> SharedPack(BuildContext& ctx, const Tensor& t, const std::string& layout,
                                 size_t bytes, const std::function<void(void*)>& pack);

dnnl::memory::dims ToDims(const std::vector<int64_t>& v);
// The row-major format tag for a rank (a, ab, abc, ...).
dnnl::memory::format_tag PlainTag(size_t rank);

// Kernel factories: nullptr when the node is outside what the kernel handles (the engine
// then runs the reference kernel). They may queue reorders in ctx.pre / ctx.post.
std::unique_ptr<CpuKernel> MakeDnnlConv(BuildContext& ctx, const Node& node);
// Conv weights [M, C/g, k...] as oneDNN's dims: [g, M/g, C/g, k...] when grouped.
dnnl::memory::dims ConvWeightDims(const std::vector<int64_t>& w, int64_t group);
// QLinearConv on oneDNN's int8 convolution (dnnl_qconv.cc).
std::unique_ptr<CpuKernel> MakeDnnlQConv(BuildContext& ctx, const Node& node);
// QLinearMatMul with constant 2-D weights on oneDNN's int8 matmul (dnnl_qmatmul.cc).
std::unique_ptr<CpuKernel> MakeDnnlQMatMul(BuildContext& ctx, const Node& node);
std::unique_ptr<CpuKernel> MakeDnnlMatMul(BuildContext& ctx, const Node& node);
// MatMul/Gemm/FusedMatMul on Kiln's own GEMM (gemm_kernel.cc): where oneDNN's matmul would
// allocate per call or change NaN (see MakeDnnlMatMul).
std::unique_ptr<CpuKernel> MakeGemmKernel(BuildContext& ctx, const Node& node);
// The same kernel when it reads B where it is (a few rows against a runtime B read
// transposed: attention scores at decode, gemm_kernel.cc), else null: tried before oneDNN's
// matmul, which would pack (transpose) B.
std::unique_ptr<CpuKernel> MakeFewRowsKernel(BuildContext& ctx, const Node& node);
std::unique_ptr<CpuKernel> MakeDnnlPool(BuildContext& ctx, const Node& node);
// Add/Sub/Mul/Div of a convolution-laid-out activation and a per-channel or scalar operand
// (dnnl_binary.cc), in the activation's layout.
std::unique_ptr<CpuKernel> MakeDnnlBinary(BuildContext& ctx, const Node& node);
// Which input of `node` is such an activation (0 or 1), or -1 when the node is not one.
int LayoutBinaryActivationInput(const Node& node);
// Whether input i of an element-wise node (or FusedElementwise program) is an activation the
// element-wise kernel can read in a convolution's layout (elementwise_kernel.cc): every
// operand f32, of the output's shape or per-channel/scalar.
bool LayoutElementwiseInput(const Node& node, size_t i);
std::unique_ptr<CpuKernel> MakeOwnKernel(BuildContext& ctx, const Node& node);
std::unique_ptr<CpuKernel> MakeFallback(BuildContext& ctx, const Node& node);

// How a convolution left an activation (rank 3..5): channels-last, or whole blocks of 8 or
// 16 channels. Kernels that work in those layouts (concat, per-channel element-wise work)
// spare the reorders to plain and back around them.
enum class ChannelLayout { kOther, kLast, kBlocked };

// Whether two f32 descs place every element at the same offset (oneDNN's operator== also
// compares fields that do not change the placement).
bool SamePlacement(const dnnl::memory::desc& a, const dnnl::memory::desc& b);
// The layout of `md` (dims `dims`) with channel block `block`; kOther when neither.
ChannelLayout ChannelLayoutOf(const dnnl::memory::desc& md, const dnnl::memory::dims& dims,
                              int block);
// The slot's stored channel layout and its block (16 tried first, then 8).
ChannelLayout StoredChannelLayout(const BuildContext& ctx, int slot, int* block);
dnnl::memory::desc ChannelLayoutDesc(const std::vector<int64_t>& shape, ChannelLayout layout,
                                     int block);

// oneDNN's reference implementations ("ref:any", "ref_int8:any", ...): plain C++ loops.
bool IsReferenceImpl(const std::string& impl);

// Whether the node's kernel reads its activation inputs through conv-family primitives
// (so they may stay blocked).
bool IsConvFamily(const Node& node);

}  // namespace kiln::cpu
