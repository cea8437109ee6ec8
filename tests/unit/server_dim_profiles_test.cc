// Profiles for symbolic dims no config names (server/model/dim_profiles.h): the range comes from
// the model's position table (or the documented default without one), the config's range
// and typical size win, bad ones are refused; a model with such a dim builds with no config,
// shows the range, and a request outside it is INVALID_ARGUMENT naming the range.
#include <gtest/gtest.h>

#include "compiler/shape/infer.h"
#include "ir/builder.h"
#include "ops/interpreter.h"
#include "server/model/dim_profiles.h"
#include "server/model/model_builder.h"
#include "server/model/padding.h"
#include "server/serving/request_validation.h"

namespace kiln::server {
namespace {

Tensor Filled(std::vector<int64_t> shape, float v) {
  Tensor t(DType::kFloat32, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] = v + 0.001f * i;
  return t;
}

// ids [batch, sequence] -> token embeddings + the first `sequence` rows of a position table
// of `positions` rows (Shape -> Gather -> Unsqueeze -> Slice, as exporters write it); no
// table when `positions` is 0.
std::unique_ptr<Graph> Encoder(int64_t positions) {
  GraphBuilder b;
  Value* ids = b.Input("ids", DType::kInt64, {Dim::Symbol("batch"), Dim::Symbol("sequence")});
  Value* e = b.Op("Gather", {b.Constant("word", Filled({100, 4}, 0.1f)), ids});
  if (positions > 0) {
    Value* seq = b.Op("Gather", {b.Op("Shape", {ids}), b.Constant("i1", Tensor::FromInt64({1}))});
    Value* seq1 = b.Op("Unsqueeze", {seq, b.Constant("ax0", Tensor::FromInt64({0}, {1}))});
    Value* zero = b.Constant("z", Tensor::FromInt64({0}, {1}));
    Value* pos = b.Op("Slice", {b.Constant("pos", Filled({positions, 4}, 0.2f)), zero, seq1, zero});
    e = b.Op("Add", {e, pos});
  }
  b.Output(b.Op("Tanh", {e}));
  return b.Build();
}

std::pair<int64_t, int64_t> RangeOf(const ModelConfig& c) {
  return c.dynamic_dim_ranges.at("sequence");
}

TEST(DimProfiles, ThePositionTableBoundsTheSequence) {
  ModelConfig c;
  ASSERT_TRUE(ResolveDimProfiles(*Encoder(512), c).ok());
  EXPECT_EQ(c.dynamic_dims.at("sequence"), kDefaultTypicalDim);
  EXPECT_EQ(RangeOf(c), (std::pair<int64_t, int64_t>{1, 512}));
  // A table smaller than the default typical size lowers it.
  ModelConfig small;
  ASSERT_TRUE(ResolveDimProfiles(*Encoder(32), small).ok());
  EXPECT_EQ(small.dynamic_dims.at("sequence"), 32);
  EXPECT_EQ(RangeOf(small), (std::pair<int64_t, int64_t>{1, 32}));
  // No table: the documented default.
  ModelConfig open;
  ASSERT_TRUE(ResolveDimProfiles(*Encoder(0), open).ok());
  EXPECT_EQ(RangeOf(open), (std::pair<int64_t, int64_t>{1, kDefaultMaxDim}));
  EXPECT_EQ(OpenDims(*Encoder(0)), (std::vector<std::string>{"sequence"}));
}

TEST(DimProfiles, TheConfigWinsAndBadOnesAreRefused) {
  auto c = ParseModelConfig("dynamic_dims: {sequence: [8, 64]}\n", ModelConfig(), "m");
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(ResolveDimProfiles(*Encoder(512), *c).ok());
  EXPECT_EQ(c->dynamic_dims.at("sequence"), 64);  // the default 128 clamped into the range
  EXPECT_EQ(RangeOf(*c), (std::pair<int64_t, int64_t>{8, 64}));
  // The existing form: a typical size, the range from the model.
  auto t = ParseModelConfig("dynamic_dims: {sequence: 40}\n", ModelConfig(), "m");
  ASSERT_TRUE(t.ok() && ResolveDimProfiles(*Encoder(512), *t).ok());
  EXPECT_EQ(t->dynamic_dims.at("sequence"), 40);
  EXPECT_EQ(RangeOf(*t), (std::pair<int64_t, int64_t>{1, 512}));
  auto m =
      ParseModelConfig("dynamic_dims: {sequence: {min: 2, typical: 16}}\n", ModelConfig(), "m");
  ASSERT_TRUE(m.ok() && ResolveDimProfiles(*Encoder(512), *m).ok());
  EXPECT_EQ(RangeOf(*m), (std::pair<int64_t, int64_t>{2, 512}));
  // A typical size beyond the table, and a range naming no open dim.
  auto big = ParseModelConfig("dynamic_dims: {sequence: 600}\n", ModelConfig(), "m");
  ASSERT_TRUE(big.ok());
  EXPECT_FALSE(ResolveDimProfiles(*Encoder(512), *big).ok());
  auto typo = ParseModelConfig("dynamic_dims: {sequense: [1, 9]}\n", ModelConfig(), "m");
  ASSERT_TRUE(typo.ok());
  const absl::Status s = ResolveDimProfiles(*Encoder(512), *typo);
  EXPECT_NE(s.message().find("sequense"), std::string::npos) << s;
  // A range may start at 0 (a decoder's empty cache); a size, a max or a class may not.
  for (const char* from_zero :
       {"dynamic_dims: {sequence: [0, 9]}", "dynamic_dims: {sequence: {min: 0, max: 9}}"}) {
    auto z = ParseModelConfig(from_zero, ModelConfig(), "m");
    ASSERT_TRUE(z.ok()) << from_zero << ": " << z.status();
    EXPECT_EQ(z->dynamic_dim_ranges.at("sequence"), (std::pair<int64_t, int64_t>{0, 9}));
  }
  // A min left out is 1 in what the refusal says too.
  auto outside =
      ParseModelConfig("dynamic_dims: {sequence: {max: 10, typical: 20}}", ModelConfig(), "m");
  ASSERT_FALSE(outside.ok());
  EXPECT_NE(outside.status().message().find("outside [1, 10]"), std::string::npos)
      << outside.status();
  for (const char* bad :
       {"dynamic_dims: {sequence: [-1, 9]}", "dynamic_dims: {sequence: [0, 0]}",
        "dynamic_dims: {sequence: {min: -1}}", "dynamic_dims: {sequence: {max: 0}}",
        "dynamic_dims: {sequence: [9, 2]}", "dynamic_dims: {sequence: [1, 2, 3]}",
        "dynamic_dims: {sequence: {min: 4, max: 8, typical: 9}}",
        "dynamic_dims: {sequence: {lo: 1}}", "dynamic_dims: {sequence: 0}",
        "dynamic_dims: {sequence: {min: 1, max: 64, classes: [64, 1]}}",
        "dynamic_dims: {sequence: {min: 1, max: 64, classes: []}}",
        "dynamic_dims: {sequence: {min: 1, max: 64, classes: [0, 64]}}"}) {
    EXPECT_FALSE(ParseModelConfig(bad, ModelConfig(), "m").ok()) << bad;
  }
  auto given = ParseModelConfig("dynamic_dims: {sequence: {min: 1, max: 64, classes: [1, 64]}}",
                                ModelConfig(), "m");
  ASSERT_TRUE(given.ok()) << given.status();
  EXPECT_EQ(given->dynamic_dim_classes.at("sequence"), (std::vector<int64_t>{1, 64}));
}

TEST(DimProfiles, BuildsWithNoConfigAndRefusesSizesOutsideTheRange) {
  ModelConfig config;
  config.max_batch_size = 2;
  ASSERT_TRUE(FinalizeModelConfig(config).ok());
  auto built = BuildModel(*Encoder(32), config, nullptr);
  ASSERT_TRUE(built.ok()) << built.status();
  const ModelSignature& sig = built->signature;
  EXPECT_EQ(sig.default_dims.at("sequence"), 32);
  EXPECT_EQ(sig.dim_ranges.at("sequence"), (std::pair<int64_t, int64_t>{1, 32}));
  EXPECT_EQ(sig.inputs[0].shape, (std::vector<int64_t>{-1, -1}));
  EXPECT_TRUE(built->check.ran && built->check.ok) << built->check.message;
  EXPECT_TRUE(DynamicDimValues(sig, {Tensor(DType::kInt64, {1, 7})}).ok());
  auto out = DynamicDimValues(sig, {Tensor(DType::kInt64, {1, 33})});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(out.status().message().find("[1, 32]"), std::string::npos) << out.status();
}

// One attention step of a decoder with a cache: x [batch, sequence, 4] new positions, past
// [batch, past, 4], mask [batch, "past + sequence"] over every position; present = past then
// the new keys, scores masked additively. The mask's dim is an expression, as exporters write.
std::unique_ptr<Graph> DecoderStep() {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {Dim::Symbol("batch"), Dim::Symbol("sequence"), Dim(4)});
  Value* past = b.Input("past", DType::kFloat32, {Dim::Symbol("batch"), Dim::Symbol("past"), Dim(4)});
  Value* mask = b.Input("mask", DType::kInt64,
                        {Dim::Symbol("batch"), Dim::Symbol("past + sequence")});
  Value* k = b.Op("MatMul", {x, b.Constant("wk", Filled({4, 4}, 0.1f))});
  Value* present = b.Op("Concat", {past, k}, {{"axis", Attribute::Int(1)}});
  Value* scores = b.Op("MatMul", {x, b.Op("Transpose", {present}, {{"perm", Attribute::Ints({0, 2, 1})}})});
  Value* m = b.Op("Cast", {b.Op("Unsqueeze", {mask, b.Constant("ax", Tensor::FromInt64({1}, {1}))})},
                  {{"to", Attribute::Int(1)}});  // ONNX FLOAT
  Value* additive = b.Op("Mul", {b.Op("Sub", {b.Constant("one", Tensor::FromFloat({1.f})), m}),
                                 b.Constant("big", Tensor::FromFloat({-10000.f}))});
  Value* p = b.Op("Softmax", {b.Op("Add", {scores, additive})}, {{"axis", Attribute::Int(-1)}});
  b.Output(b.Op("MatMul", {p, present}));
  b.Output(present);
  return b.Build();
}

// A decoder step loads with no config: "past + sequence" follows the two symbols (no profile
// of its own), a request whose mask disagrees is refused naming it, and other sizes build.
// Shape classes are refused there: the default range [1, 4096] is beyond kMaxClassSize.
TEST(DimProfiles, ADecoderStepWithAnExpressionDimLoadsWithNoConfig) {
  ModelConfig config;
  config.max_batch_size = 1;
  ASSERT_TRUE(FinalizeModelConfig(config).ok());
  auto model = DecoderStep();
  auto built = BuildModel(*model, config, nullptr);
  ASSERT_TRUE(built.ok()) << built.status();
  const ModelSignature& sig = built->signature;
  EXPECT_EQ(sig.dim_symbols[2], (std::vector<std::string>{"", "past + sequence"}));
  EXPECT_EQ(sig.inputs[2].shape, (std::vector<int64_t>{-1, -1}));
  EXPECT_FALSE(sig.dim_ranges.count("past + sequence"));
  EXPECT_EQ(sig.dim_ranges.at("past"), (std::pair<int64_t, int64_t>{1, kDefaultMaxDim}));
  EXPECT_EQ(sig.default_dims.at("past"), kDefaultTypicalDim);
  EXPECT_TRUE(built->check.ran && built->check.ok) << built->check.message;
  EXPECT_FALSE(built->padding.has_value());
  EXPECT_NE(built->padding_refused.find("above the 1024 positions"), std::string::npos)
      << built->padding_refused;
  auto ok = DynamicDimValues(sig, {Tensor(DType::kFloat32, {1, 1, 4}),
                                   Tensor(DType::kFloat32, {1, 9, 4}), Tensor(DType::kInt64, {1, 10})});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(*ok, (std::map<std::string, int64_t>{{"past", 9}, {"sequence", 1}}));
  auto bad = DynamicDimValues(sig, {Tensor(DType::kFloat32, {1, 1, 4}),
                                    Tensor(DType::kFloat32, {1, 9, 4}), Tensor(DType::kInt64, {1, 9})});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("('past + sequence') is 9, but the other inputs make it 10"),
            std::string::npos)
      << bad.status();
  auto engine = BuildShapeEngine(*model, config, *built, {{"past", 9}, {"sequence", 1}}, 1);
  ASSERT_TRUE(engine.ok()) << engine.status();
  EXPECT_EQ((*engine)->inputs()[2].shape, (std::vector<int64_t>{1, 10}));
}

// With the ranges narrowed, the decoder step is proven paddable: its cache dim and its new
// positions padded at their own ends, the mask's "past + sequence" as two regions, `present`
// cut back region by region. Every (past, sequence) served from its class's engine matches the
// reference at the exact sizes, `present` included.
TEST(DimProfiles, ADecoderStepIsServedByShapeClassesRegionByRegion) {
  ModelConfig config;
  config.max_batch_size = 1;
  config.dynamic_dim_ranges = {{"past", {1, 40}}, {"sequence", {1, 8}}};
  ASSERT_TRUE(FinalizeModelConfig(config).ok());
  auto model = DecoderStep();
  auto built = BuildModel(*model, config, nullptr);
  ASSERT_TRUE(built.ok()) << built.status();
  ASSERT_TRUE(built->padding.has_value()) << built->padding_refused;
  EXPECT_EQ(built->padding->classes.at("past"), (std::vector<int64_t>{1, 16, 24, 32, 40}));
  EXPECT_EQ(built->padding->classes.at("sequence"), (std::vector<int64_t>{1, 8}));
  EXPECT_EQ(built->padding->outputs[1], (std::vector<std::string>{"", "past + sequence", ""}));
  for (const auto& [past, seq] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {9, 1}, {17, 3}, {40, 8}}) {
    const DimValues real{{"past", past}, {"sequence", seq}};
    const DimValues cls = *ClassOf(built->padding->classes, real);
    auto engine = BuildShapeEngine(*model, config, *built, cls, 1, /*check=*/false);
    ASSERT_TRUE(engine.ok()) << engine.status();
    Tensor x = Filled({1, seq, 4}, 0.3f), cache = Filled({1, past, 4}, 0.7f);
    Tensor mask(DType::kInt64, {1, past + seq});
    for (int64_t i = 0; i < mask.numel(); ++i) mask.mutable_data<int64_t>()[i] = 1;
    auto in = ResizeToDims({x, cache, mask}, built->padding->inputs, real, cls);
    ASSERT_TRUE(in.ok()) << in.status();
    std::vector<Tensor> out;
    ASSERT_TRUE((*engine)->Run(*in, out).ok());
    auto cut = ResizeToDims(out, built->padding->outputs, cls, real);
    ASSERT_TRUE(cut.ok()) << cut.status();
    std::unique_ptr<Graph> exact = model->Clone();
    ASSERT_TRUE(shape::Specialize(*exact, 1, real).ok());
    auto want = ref::Run(*exact, {{"x", x}, {"past", cache}, {"mask", mask}});
    ASSERT_TRUE(want.ok()) << want.status();
    for (size_t k = 0; k < 2; ++k) {
      const Tensor& w = want->at(exact->outputs[k]->name);
      ASSERT_EQ((*cut)[k].shape(), w.shape()) << past << "/" << seq << " output " << k;
      for (int64_t i = 0; i < w.numel(); ++i) {
        ASSERT_NEAR((*cut)[k].data<float>()[i], w.data<float>()[i], 1e-4)
            << past << "/" << seq << " output " << k << " at " << i;
      }
    }
  }
}

}  // namespace
}  // namespace kiln::server
