// Engine::RunAppending on the CPU engine: a decoder step's `present = Concat(past, new)` with
// the past already in the present tensor, the past input never read (it holds NaN here), must
// give what a plain Run gives, bit for bit, and the plain Run what the reference gives. The
// engine offers it only where it is safe: not when the past has another reader, when it is
// not the Concat's first operand (a computed value is), or when the Concat's result is not an
// output.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "compiler/compile.h"
#include "ir/builder.h"
#include "ops/interpreter.h"
#include "runtime/check/differential.h"
#include "runtime/cpu/cpu_engine.h"

namespace kiln {
namespace {

constexpr int64_t kBatch = 2, kHeads = 3, kPast = 5, kNew = 2, kDim = 8;

Tensor NaNs(DType dtype, const std::vector<int64_t>& shape) {
  Tensor t(dtype, shape);
  std::fill_n(t.mutable_data<float>(), t.numel(), std::nanf(""));
  return t;
}

// The present of a step whose past is `past`: the past at the front of each [batch, head]
// block, NaN where the new positions go (the engine must write them).
Tensor PrefilledPresent(const Tensor& past) {
  Tensor t = NaNs(DType::kFloat32, {kBatch, kHeads, kPast + kNew, kDim});
  for (int64_t b = 0; b < kBatch * kHeads; ++b) {
    std::memcpy(t.mutable_data<float>() + b * (kPast + kNew) * kDim,
                past.data<float>() + b * kPast * kDim, kPast * kDim * sizeof(float));
  }
  return t;
}

struct Step {
  std::unique_ptr<Graph> graph;
  CompiledGraph compiled;
  std::unique_ptr<runtime::Engine> engine;
};

// Attention of the new positions over the past and themselves; `extra` adds a second
// reader of the past (its row sums as an output).
Step BuildStep(bool past_first, bool extra, bool present_is_output) {
  GraphBuilder b;
  Value* past = b.Input("past", DType::kFloat32, {kBatch, kHeads, kPast, kDim});
  Value* k = b.Input("k", DType::kFloat32, {kBatch, kHeads, kNew, kDim});
  Value* q = b.Input("q", DType::kFloat32, {kBatch, kHeads, kNew, kDim});
  // Not first: after new positions that a node computes (no input to take in place).
  Value* present = past_first
                       ? b.Op("Concat", {past, k}, {{"axis", Attribute::Int(2)}})
                       : b.Op("Concat", {b.Op("Relu", {k}), past}, {{"axis", Attribute::Int(2)}});
  Value* kt = b.Op("Transpose", {present}, {{"perm", Attribute::Ints({0, 1, 3, 2})}});
  Value* scores = b.Op("Softmax", {b.Op("MatMul", {q, kt})}, {{"axis", Attribute::Int(-1)}});
  b.Output(b.Op("MatMul", {scores, present}));
  if (present_is_output) b.Output(present);
  if (extra) b.Output(b.Op("ReduceSum", {past}, {{"keepdims", Attribute::Int(0)}}));
  Step s;
  s.graph = b.Build();
  CompileOptions co;
  co.pipeline.level = OptLevel::kO2;
  absl::StatusOr<CompiledGraph> c = CompileGraph(*s.graph, co);
  EXPECT_TRUE(c.ok()) << c.status();
  if (!c.ok()) return s;
  s.compiled = std::move(*c);
  absl::StatusOr<std::unique_ptr<runtime::Engine>> e = cpu::BuildCpuEngine(s.compiled, {});
  EXPECT_TRUE(e.ok()) << e.status();
  if (e.ok()) s.engine = std::move(*e);
  return s;
}

size_t IndexOf(const std::vector<runtime::TensorSpec>& specs, const std::string& name) {
  for (size_t i = 0; i < specs.size(); ++i) {
    if (specs[i].name == name) return i;
  }
  ADD_FAILURE() << "no tensor '" << name << "'";
  return 0;
}

TEST(CpuInPlaceAppend, ThePastInThePresentGivesThePlainRunsOutputs) {
  Step s = BuildStep(/*past_first=*/true, /*extra=*/false, /*present_is_output=*/true);
  ASSERT_TRUE(s.engine);
  runtime::Engine& e = *s.engine;
  const size_t past = IndexOf(e.inputs(), "past");
  ASSERT_EQ(e.in_place_appends().size(), 1u);
  EXPECT_EQ(e.in_place_appends()[0].input, past);
  const size_t present = e.in_place_appends()[0].output;
  EXPECT_EQ(e.outputs()[present].shape, (std::vector<int64_t>{kBatch, kHeads, kPast + kNew, kDim}));

  absl::StatusOr<ref::TensorMap> feeds = check::RandomInputs(*s.graph, {});
  ASSERT_TRUE(feeds.ok()) << feeds.status();
  absl::StatusOr<ref::TensorMap> want = ref::Run(*s.graph, *feeds);
  ASSERT_TRUE(want.ok()) << want.status();
  std::vector<Tensor> ins, plain;
  for (const auto& spec : e.inputs()) ins.push_back(feeds->at(spec.name));
  ASSERT_TRUE(e.Run(ins, plain).ok());
  for (size_t k = 0; k < plain.size(); ++k) {
    const Tensor& w = want->at(e.outputs()[k].name);
    ASSERT_EQ(plain[k].shape(), w.shape());
    for (int64_t i = 0; i < w.numel(); ++i) {
      ASSERT_NEAR(plain[k].GetDouble(i), w.GetDouble(i), 1e-5 + 1e-4 * std::abs(w.GetDouble(i)))
          << e.outputs()[k].name << " element " << i;
    }
  }

  // Twice: the second run's present holds the first's new positions, which must be written over.
  std::vector<Tensor> in_place(plain.size());
  for (size_t k = 0; k < plain.size(); ++k) {
    in_place[k] =
        k == present ? PrefilledPresent(ins[past]) : NaNs(plain[k].dtype(), plain[k].shape());
  }
  std::vector<Tensor> unread = ins;
  unread[past] = NaNs(DType::kFloat32, ins[past].shape());
  for (int run = 0; run < 2; ++run) {
    ASSERT_TRUE(e.RunAppending(unread, in_place).ok());
    for (size_t k = 0; k < plain.size(); ++k) {
      EXPECT_EQ(std::memcmp(in_place[k].raw(), plain[k].raw(), plain[k].nbytes()), 0)
          << e.outputs()[k].name << ", run " << run;
    }
  }

  // A plain Run of the same engine still reads the past.
  std::vector<Tensor> again;
  ASSERT_TRUE(e.Run(ins, again).ok());
  EXPECT_EQ(std::memcmp(again[present].raw(), plain[present].raw(), plain[present].nbytes()), 0);
}

TEST(CpuInPlaceAppend, OutputsNotPassedAtTheirShapeAreRefused) {
  Step s = BuildStep(true, false, true);
  ASSERT_TRUE(s.engine);
  std::vector<Tensor> ins;
  for (const auto& spec : s.engine->inputs()) ins.emplace_back(spec.dtype, spec.shape);
  std::vector<Tensor> none;
  absl::Status st = s.engine->RunAppending(ins, none);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  std::vector<Tensor> wrong;
  for (const auto& spec : s.engine->outputs()) wrong.emplace_back(spec.dtype, spec.shape);
  wrong[0] = Tensor(DType::kFloat32, {1});
  st = s.engine->RunAppending(ins, wrong);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("in-place append"), std::string::npos) << st;
}

void ExpectNoAppend(const Step& s) {
  ASSERT_TRUE(s.engine);
  EXPECT_TRUE(s.engine->in_place_appends().empty());
  std::vector<Tensor> ins, outs;
  for (const auto& spec : s.engine->inputs()) ins.emplace_back(spec.dtype, spec.shape);
  for (const auto& spec : s.engine->outputs()) outs.emplace_back(spec.dtype, spec.shape);
  absl::Status st = s.engine->RunAppending(ins, outs);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_TRUE(s.engine->Run(ins, outs).ok());
}

TEST(CpuInPlaceAppend, APastWithAnotherReaderIsNotTakenInPlace) {
  ExpectNoAppend(BuildStep(true, /*extra=*/true, true));
}

TEST(CpuInPlaceAppend, APastAfterTheNewPositionsIsNotTakenInPlace) {
  ExpectNoAppend(BuildStep(/*past_first=*/false, false, true));
}

TEST(CpuInPlaceAppend, AConcatThatIsNoOutputIsNotTakenInPlace) {
  ExpectNoAppend(BuildStep(true, false, /*present_is_output=*/false));
}

}  // namespace
}  // namespace kiln
