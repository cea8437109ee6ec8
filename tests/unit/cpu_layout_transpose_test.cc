// Transposes that relabel a convolution layout (runtime/cpu/layout_transpose.h): ConvNeXt's
// depthwise convolution -> permute to channels-last -> LayerNorm -> MLP -> permute back ->
// layer scale + residual, at ranks 3, 4 and 5, batch 1 and 3, in both activation layouts,
// equal to the reference on the raw graph; in the primitive layout on AVX-512 (where the
// convolutions store channels-last) no reorder is left but the graph input's and output's.
// The negative cases keep their Transposes' copies: an input read twice, an output that is
// a graph output or read plain, a permute of another axis.
#include <gtest/gtest.h>

#include <limits>

#include "compiler/compile.h"
#include "ir/builder.h"
#include "ops/interpreter.h"
#include "runtime/check/compare.h"
#include "runtime/cpu/cpu_engine.h"
#include "runtime/cpu/isa.h"
#include "runtime/cpu/layout_transpose.h"
#include "tests/unit/test_tensors.h"

namespace kiln {
namespace {

Tensor Random(const std::vector<int64_t>& shape, int seed) {
  return testing::SeededUniform(shape, static_cast<uint64_t>(seed));
}

std::vector<int64_t> ToLast(size_t rank) { return cpu::ChannelsLastPerm(rank); }
std::vector<int64_t> ToFirst(size_t rank) { return cpu::ChannelsFirstPerm(rank); }

// What a case changes in the block.
struct Variant {
  bool mlp_output_also_out = false;  // the MLP's output is a graph output too (read twice)
  bool mlp_read_twice = false;       // the MLP's output also feeds a plain Relu
  bool permuted_is_output = false;   // the channels-last tensor is a graph output
  bool back_read_plain = false;      // the permuted-back tensor feeds a Softmax (plain reader)
  bool other_axis = false;           // permute spatial axes, not the channels
};

constexpr int64_t kC = 32;

std::vector<int64_t> Spatial(size_t rank) { return std::vector<int64_t>(rank - 2, 5); }

// x [n, 32, 5...] -> depthwise conv -> T(to last) -> LayerNorm -> MatMul 64 -> Relu -> MatMul
// 32 -> T(to first) -> * scale + x -> depthwise conv again (the next block's) -> output.
std::unique_ptr<Graph> Block(int64_t n, size_t rank, const Variant& v) {
  GraphBuilder b;
  std::vector<int64_t> xs = {n, kC};
  for (int64_t s : Spatial(rank)) xs.push_back(s);
  Value* x = b.Input("x", DType::kFloat32, ToShape(xs));
  std::vector<int64_t> ws = {kC, 1};
  for (size_t d = 2; d < rank; ++d) ws.push_back(3);
  const std::vector<int64_t> pads(2 * (rank - 2), 1);
  const auto dw = [&](Value* in, const char* name, int seed) {
    return b.Op("Conv", {in, b.Constant(name, Random(ws, seed))},
                {{"pads", Attribute::Ints(pads)}, {"group", Attribute::Int(kC)}});
  };
  Value* c = dw(x, "w0", 1);
  std::vector<int64_t> to_last = ToLast(rank);
  if (v.other_axis) std::swap(to_last[1], to_last[2]);
  Value* t = b.Op("Transpose", {c}, {{"perm", Attribute::Ints(to_last)}});
  if (v.permuted_is_output) b.Output(t);
  Value* ln = b.Op("LayerNormalization",
                   {t, b.Constant("g", Random({kC}, 2)), b.Constant("bt", Random({kC}, 3))},
                   {{"axis", Attribute::Int(-1)}});
  Value* h = b.Op("Relu", {b.Op("MatMul", {ln, b.Constant("w1", Random({kC, 2 * kC}, 4))})});
  Value* m = b.Op("MatMul", {h, b.Constant("w2", Random({2 * kC, kC}, 5))});
  if (v.mlp_output_also_out) b.Output(m);
  std::vector<int64_t> to_first = ToFirst(rank);
  if (v.other_axis) std::swap(to_first[2], to_first[3]);
  Value* back = b.Op("Transpose", {m}, {{"perm", Attribute::Ints(to_first)}});
  if (v.back_read_plain) b.Output(b.Op("Softmax", {back}, {{"axis", Attribute::Int(1)}}));
  std::vector<int64_t> scale = {kC};
  for (size_t d = 2; d < rank; ++d) scale.push_back(1);
  Value* r = b.Op("Add", {b.Op("Mul", {back, b.Constant("scale", Random(scale, 6))}), x});
  b.Output(dw(r, "w3", 7));
  // Read last of all: were the MLP's output's buffer handed to the Transposes' readers
  // only, it would be reused before this.
  if (v.mlp_read_twice) b.Output(b.Op("Relu", {m}));
  return b.Build();
}

// Builds the block in `layout`, checks every output against the reference twice (the second
// run over the first's buffers), returns the engine's Transposes that ran nothing.
int CheckBlock(const Graph& g, const CompiledGraph& compiled, const Tensor& x,
               cpu::ActivationLayout layout) {
  auto want = ref::Run(g, {{"x", x}});
  EXPECT_TRUE(want.ok()) << want.status();
  cpu::CpuEngineOptions eo;
  eo.layout = layout;
  eo.threads = 2;
  // The layouts are under test, not the products: below a batch of 4 the Winograd kernel is
  // kept where a timed trial finds it faster (a busy host decides either way), and its error
  // exceeds this test's tolerance (cpu_winograd_test checks it against its own).
  eo.winograd = false;
  auto engine = cpu::BuildCpuEngine(compiled, eo);
  EXPECT_TRUE(engine.ok()) << engine.status();
  if (!engine.ok() || !want.ok()) return -1;
  EXPECT_EQ((*engine)->info().fallback_ops, 0);
  for (int run = 0; run < 2; ++run) {
    std::vector<Tensor> out;
    EXPECT_TRUE((*engine)->Run({x}, out).ok());
    for (size_t k = 0; k < out.size(); ++k) {
      const std::string& name = (*engine)->outputs()[k].name;
      const check::Divergence d = check::CompareTensors(out[k], want->at(name), {1e-3, 1e-4});
      EXPECT_TRUE(d.ok) << name << ": " << d.message;
    }
  }
  return (*engine)->info().free_transposes;
}

// Returns the primitive layout's free Transposes of the last batch checked.
int CheckEverywhere(size_t rank, const Variant& v) {
  int free = -1;
  for (int64_t n : {1, 3}) {
    auto g = Block(n, rank, v);
    CompileOptions co;
    co.pipeline.level = OptLevel::kO2;
    auto compiled = CompileGraph(*g, co);
    EXPECT_TRUE(compiled.ok()) << compiled.status();
    if (!compiled.ok()) return -1;
    std::vector<int64_t> xs = {n, kC};
    for (int64_t s : Spatial(rank)) xs.push_back(s);
    Tensor x = Random(xs, 8);
    x.mutable_data<float>()[3] = std::numeric_limits<float>::quiet_NaN();
    for (auto layout : {cpu::ActivationLayout::kBlocked, cpu::ActivationLayout::kPrimitive}) {
      SCOPED_TRACE(::testing::Message()
                   << "rank " << rank << " n " << n << " " << cpu::ActivationLayoutName(layout));
      free = CheckBlock(*g, *compiled, x, layout);
    }
  }
  return free;
}

bool ConvsStoreChannelsLast() { return cpu::CpuIsa().channel_block == 16; }

TEST(CpuLayoutTranspose, PermutesAroundConvolutionsCostNoCopy) {
  for (size_t rank : {3u, 4u, 5u}) {
    const int free = CheckEverywhere(rank, {});
    // The permute back is placed before the build: it runs nothing wherever its input has
    // no other reader. The permute to channels-last runs nothing where the convolution
    // stored channels-last, which oneDNN's primitive layout on AVX-512 does for 2-D
    // (before, each Transpose cost a reorder to or from plain and a copy of its own).
    EXPECT_GE(free, 1) << "rank " << rank;
    if (ConvsStoreChannelsLast() && rank == 4) {
      EXPECT_EQ(free, 2);
    }
  }
}

TEST(CpuLayoutTranspose, InputReadTwiceKeepsItsCopy) {
  const int free = CheckEverywhere(4, {.mlp_output_also_out = true});
  if (ConvsStoreChannelsLast()) {  // the permute to channels-last only
    EXPECT_EQ(free, 1);
  }
}

TEST(CpuLayoutTranspose, InputWithASecondReaderKeepsItsCopy) {
  const int free = CheckEverywhere(4, {.mlp_read_twice = true});
  if (ConvsStoreChannelsLast()) {  // the permute to channels-last only
    EXPECT_EQ(free, 1);
  }
}

// Expand(c [1, 1, 1, 32] -> [n, 24, 24, 32]) (74 KiB and more: left unfolded, folding
// would inflate the model) ->
// Transpose to channels-first -> + Conv(x) -> Conv. The Expand is evaluated when the engine is
// built, and so is the Transpose after it: a constant, plain, whatever layout the Transpose's
// output was placed in before.
TEST(CpuLayoutTranspose, ConstantEvaluatedAtBuildIsReadPlain) {
  constexpr int64_t kS = 24;
  for (int64_t n : {1, 3}) {
    GraphBuilder b;
    Value* x = b.Input("x", DType::kFloat32, {n, kC, kS, kS});
    Value* e = b.Op("Expand", {b.Constant("c", Random({1, 1, 1, kC}, 1)),
                               b.Constant("shape", Tensor::FromInt64({n, kS, kS, kC}, {4}))});
    Value* t = b.Op("Transpose", {e}, {{"perm", Attribute::Ints(ToFirst(4))}});
    const Attribute pads = Attribute::Ints({1, 1, 1, 1});
    Value* c = b.Op("Conv", {x, b.Constant("w0", Random({kC, kC, 3, 3}, 2))}, {{"pads", pads}});
    Value* s = b.Op("Add", {c, t});
    b.Output(b.Op("Conv", {s, b.Constant("w1", Random({kC, kC, 3, 3}, 3))}, {{"pads", pads}}));
    auto g = b.Build();
    CompileOptions co;
    co.pipeline.level = OptLevel::kO2;
    auto compiled = CompileGraph(*g, co);
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    const Tensor xt = Random({n, kC, kS, kS}, 4);
    for (auto layout : {cpu::ActivationLayout::kBlocked, cpu::ActivationLayout::kPrimitive}) {
      SCOPED_TRACE(::testing::Message() << "n " << n << " " << cpu::ActivationLayoutName(layout));
      CheckBlock(*g, *compiled, xt, layout);
    }
  }
}

TEST(CpuLayoutTranspose, PermutedGraphOutputIsWrittenPlain) {
  for (size_t rank : {3u, 4u}) {
    const int free = CheckEverywhere(rank, {.permuted_is_output = true});
    if (ConvsStoreChannelsLast()) {  // the permute back
      EXPECT_EQ(free, 1) << "rank " << rank;
    }
  }
}

TEST(CpuLayoutTranspose, PlainReaderOfThePermutedBackTensor) {
  const int free = CheckEverywhere(4, {.back_read_plain = true});
  if (ConvsStoreChannelsLast()) {  // the permute to channels-last only
    EXPECT_EQ(free, 1);
  }
}

TEST(CpuLayoutTranspose, OtherAxesAreRealTransposes) {
  EXPECT_EQ(CheckEverywhere(4, {.other_axis = true}), 0);
  EXPECT_EQ(CheckEverywhere(5, {.other_axis = true}), 0);
}

}  // namespace
}  // namespace kiln
