// An attention mask added to a decoder exported without one (server/model/cache_mask.h): the
// rewrite, its proof and what it refuses; positions read from a decoder's own mask
// (server/model/mask_positions.h); Range's length when its limit is its start plus a
// constant (compiler/shape/rules_indexing.cc); and a request that leaves the added mask out
// (server/serving/request_validation.h).
#include <gtest/gtest.h>

#include "compiler/shape/infer.h"
#include "ir/builder.h"
#include "ops/interpreter.h"
#include "server/model/cache_mask.h"
#include "server/model/mask_positions.h"
#include "server/model/padding.h"
#include "server/serving/request_validation.h"
#include "tests/unit/cpu_engine_util.h"

namespace kiln::server {
namespace {

using cpu_test::Random;

constexpr int64_t kHidden = 8, kVocab = 11, kTable = 32;

struct Form {
  bool positions_from_past = true;  // Range(past, past + sequence); else a position_ids input
  bool heads_first = false;         // the scores laid out [sequence, batch, 1, keys]
  bool mean_over_keys = false;      // the context also averages every cached key
  bool sliced_positions = false;    // the position rows sliced [past, past + sequence)
  bool own_mask = false;            // takes attention_mask [batch, past + sequence]
  bool causal = false;              // query i sees keys up to past + i (the same Range)
  bool no_position_term = false;    // adds no position rows (a Range then feeds causal only)
};

Value* I64(GraphBuilder& b, const std::string& name, std::vector<int64_t> v, bool scalar = false) {
  const auto n = static_cast<int64_t>(v.size());
  return b.Constant(name, scalar ? Tensor::Scalar(DType::kInt64, static_cast<double>(v[0]))
                                 : Tensor::FromInt64(v, {n}));
}

// A one-head decoder step with past and no attention mask, under the exporters' names; the
// keys are also the values.
std::unique_ptr<Graph> Decoder(const Form& f) {
  GraphBuilder b;
  const Dim batch = Dim::Symbol("batch"), seq = Dim::Symbol("sequence");
  Value* ids = b.Input("input_ids", DType::kInt64, {batch, seq});
  Value* past = b.Input("past_key_values.0.key", DType::kFloat32,
                        {batch, 1, Dim::Symbol("past_sequence_length"), kHidden});
  Value* pos = nullptr;
  Value* wpe = b.Constant("wpe", Random({kTable, kHidden}, 2));
  Value* pos_rows = nullptr;
  if (f.sliced_positions) {
    Value* p = b.Op("Slice", {b.Op("Shape", {past}), I64(b, "s2", {2}), I64(b, "s3", {3})});
    Value* s = b.Op("Slice", {b.Op("Shape", {ids}), I64(b, "s1", {1}), I64(b, "s2b", {2})});
    pos_rows = b.Op("Slice", {wpe, p, b.Op("Add", {p, s}), I64(b, "s0", {0})});
  }
  // past .. past + sequence - 1, as torch.arange(past, past + sequence) exports.
  Value *p = nullptr, *s = nullptr, *from_past = nullptr;
  if ((f.positions_from_past && !f.sliced_positions) || f.causal) {
    p = b.Op("Gather", {b.Op("Shape", {past}), I64(b, "two", {2}, true)});
    s = b.Op("Gather", {b.Op("Shape", {ids}), I64(b, "one", {1}, true)});
    from_past = b.Op("Range", {p, b.Op("Add", {p, s}), I64(b, "step", {1}, true)});
  }
  if (f.sliced_positions || f.no_position_term) {
  } else if (f.positions_from_past) {
    pos = from_past;
  } else {
    pos = b.Input("position_ids", DType::kInt64, {batch, seq});
  }
  if (!pos_rows && pos) pos_rows = b.Op("Gather", {wpe, pos});
  Value* x = b.Op("Gather", {b.Constant("wte", Random({kVocab, kHidden}, 1)), ids});
  if (pos_rows) x = b.Op("Add", {x, pos_rows});
  Value* axis1 = I64(b, "axis1", {1});
  auto proj = [&](const char* w, uint64_t seed) {
    return b.Op("Unsqueeze",
                {b.Op("MatMul", {x, b.Constant(w, Random({kHidden, kHidden}, seed))}), axis1});
  };
  Value* present = b.Op("Concat", {past, proj("wk", 3)}, {{"axis", Attribute::Int(2)}});
  Value* scores = b.Op("MatMul", {proj("wq", 4), b.Op("Transpose", {present},
                                                      {{"perm", Attribute::Ints({0, 1, 3, 2})}})});
  const std::vector<int64_t> swap{2, 0, 1, 3};  // [sequence, batch, 1, keys] and back
  if (f.own_mask) {                             // (1 - mask) * -1e4 over [batch, 1, 1, keys]
    Value* m = b.Input("attention_mask", DType::kInt64,
                       {batch, Dim::Symbol("past_sequence_length + sequence")});
    Value* mf = b.Op("Cast", {b.Op("Unsqueeze", {m, I64(b, "axes12", {1, 2})})},
                     {{"to", Attribute::Int(static_cast<int64_t>(DType::kFloat32))}});
    Value* one = b.Constant("onef", Tensor::Scalar(DType::kFloat32, 1.0));
    scores = b.Op(
        "Add", {scores, b.Op("Mul", {b.Op("Sub", {one, mf}),
                                     b.Constant("neg", Tensor::Scalar(DType::kFloat32, -1e4))})});
  }
  if (f.causal) {  // keys after past + i are hidden from query i: [sequence, keys]
    Value* keys =
        b.Op("Range", {I64(b, "zero", {0}, true), b.Op("Add", {p, s}), I64(b, "step1", {1}, true)});
    Value* future = b.Op("Greater", {b.Op("Unsqueeze", {keys, I64(b, "axis0", {0})}),
                                     b.Op("Unsqueeze", {from_past, axis1})});
    scores = b.Op(
        "Add",
        {scores, b.Op("Where", {future, b.Constant("negc", Tensor::Scalar(DType::kFloat32, -1e4)),
                                b.Constant("zerof", Tensor::Scalar(DType::kFloat32, 0.0))})});
  }
  if (f.heads_first) scores = b.Op("Transpose", {scores}, {{"perm", Attribute::Ints(swap)}});
  Value* probs = b.Op("Softmax", {scores}, {{"axis", Attribute::Int(-1)}});
  if (f.heads_first) probs = b.Op("Transpose", {probs}, {{"perm", Attribute::Ints({1, 2, 0, 3})}});
  Value* ctx = b.Op("MatMul", {probs, present});
  if (f.mean_over_keys) {
    ctx = b.Op("Add", {ctx, b.Op("ReduceMean", {present, I64(b, "axis2", {2})},
                                 {{"keepdims", Attribute::Int(1)}})});
  }
  ctx = b.Op("Squeeze", {ctx, axis1});
  b.Output(b.Op("MatMul", {ctx, b.Constant("head", Random({kHidden, kVocab}, 5))}));
  b.graph().outputs.back()->name = "logits";
  b.Output(present);
  b.graph().outputs.back()->name = "present.0.key";
  std::unique_ptr<Graph> g = b.Build();
  EXPECT_TRUE(shape::InferShapes(*g).ok());  // the outputs' shapes, as an export declares them
  return g;
}

ModelConfig Config() {
  ModelConfig c;
  c.warmup.int_lo = 0;
  c.warmup.int_hi = kVocab - 1;
  return c;
}

// `g` at `batch` rows and the sizes given, shapes inferred.
std::unique_ptr<Graph> At(const Graph& g, int64_t batch, int64_t past, int64_t seq) {
  std::unique_ptr<Graph> s = g.Clone();
  EXPECT_TRUE(
      shape::Specialize(*s, batch, {{"past_sequence_length", past}, {"sequence", seq}}).ok());
  return s;
}

// `feed` less what `g` does not take.
ref::TensorMap InputsOf(const Graph& g, ref::TensorMap feed) {
  ref::TensorMap in;
  for (const Value* v : g.inputs) {
    if (feed.count(v->name)) in[v->name] = feed.at(v->name);
  }
  return in;
}

Tensor Ones(int64_t rows, int64_t n) {
  Tensor t(DType::kInt64, {rows, n});
  for (int64_t i = 0; i < t.numel(); ++i) t.SetInt(i, 1);
  return t;
}

// Rows at their own cache lengths, run alone on the exported model and together on the masked
// one, padded to a cache of `pad` and 2 new positions (one real): the real logits and presents
// must match.
void ExpectPaddedRowsMatch(const Graph& original, const Graph& masked,
                           const std::vector<int64_t>& pasts, int64_t pad) {
  const auto rows = static_cast<int64_t>(pasts.size());
  Tensor ids(DType::kInt64, {rows, 2}), past(DType::kFloat32, {rows, 1, pad, kHidden});
  Tensor mask(DType::kInt64, {rows, pad + 2}), positions(DType::kInt64, {rows, 2});
  std::vector<ref::TensorMap> want;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t n = pasts[static_cast<size_t>(r)];
    std::unique_ptr<Graph> one = At(original, 1, n, 1);
    ref::TensorMap feed{{"input_ids", Tensor::FromInt64({(r * 5 + 3) % kVocab}, {1, 1})},
                        {"past_key_values.0.key", Random({1, 1, n, kHidden}, 10 + r)},
                        {"position_ids", Tensor::FromInt64({n}, {1, 1})},
                        {"attention_mask", Ones(1, n + 1)}};
    auto got = ref::Run(*one, InputsOf(*one, feed));
    ASSERT_TRUE(got.ok()) << got.status();
    want.push_back(*got);
    ids.SetInt(r * 2, feed.at("input_ids").GetInt(0));
    positions.SetInt(r * 2, n);
    const Tensor& p = feed.at("past_key_values.0.key");
    for (int64_t i = 0; i < p.numel(); ++i) past.SetDouble(r * pad * kHidden + i, p.GetDouble(i));
    for (int64_t i = 0; i < n; ++i) mask.SetInt(r * (pad + 2) + i, 1);
    mask.SetInt(r * (pad + 2) + pad, 1);  // the one real new position
  }
  std::unique_ptr<Graph> padded = At(masked, rows, pad, 2);
  ref::TensorMap feed{{"input_ids", ids},
                      {"past_key_values.0.key", past},
                      {"attention_mask", mask},
                      {"position_ids", positions}};
  auto got = ref::Run(*padded, InputsOf(*padded, feed));
  ASSERT_TRUE(got.ok()) << got.status();
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t n = pasts[static_cast<size_t>(r)];
    const Tensor& logits = got->at("logits");
    const Tensor& w = want[static_cast<size_t>(r)].at("logits");
    for (int64_t v = 0; v < kVocab; ++v) {
      EXPECT_NEAR(logits.GetDouble(r * 2 * kVocab + v), w.GetDouble(v), 1e-5)
          << "row " << r << " (past " << n << ") logit " << v;
    }
    const Tensor& present = got->at("present.0.key");
    const Tensor& wp = want[static_cast<size_t>(r)].at("present.0.key");
    for (int64_t i = 0; i < n * kHidden; ++i) {  // the past where it was, the new key at `pad`
      EXPECT_EQ(present.GetDouble((r * (pad + 2)) * kHidden + i), wp.GetDouble(i));
    }
    for (int64_t i = 0; i < kHidden; ++i) {
      EXPECT_NEAR(present.GetDouble((r * (pad + 2) + pad) * kHidden + i),
                  wp.GetDouble(n * kHidden + i), 1e-6);
    }
  }
}

TEST(CacheMask, PositionsFromTheCacheLengthReadItFromTheMaskAndRowsShareIt) {
  std::unique_ptr<Graph> original = Decoder({});
  Graph g = std::move(*Decoder({}));
  absl::StatusOr<CacheMaskOutcome> out = AddCacheMask(g, Config());
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_TRUE(out->added()) << out->refused;
  EXPECT_EQ(out->input, "attention_mask");
  EXPECT_TRUE(out->rows_share_length);
  EXPECT_NE(out->ToString().find("rows of one cache length per step"), std::string::npos);
  ASSERT_EQ(g.inputs.size(), 3u);
  EXPECT_EQ(g.inputs.back()->name, "attention_mask");
  EXPECT_EQ((*g.inputs.back()->shape)[1].param, "past_sequence_length + sequence");
  // The positions' count stays static though their start is read at run time.
  std::unique_ptr<Graph> at = At(g, 2, 6, 3);
  EXPECT_TRUE(IsStatic(*at->FindValue("logits")->shape));
  ExpectPaddedRowsMatch(*original, g, {4, 4}, 9);
  ExpectPaddedRowsMatch(*original, g, {0}, 3);  // a prompt's first step: an empty cache
}

TEST(CacheMask, FedPositionsLetRowsOfAnyLengthShareAStep) {
  std::unique_ptr<Graph> original = Decoder({.positions_from_past = false});
  Graph g = std::move(*Decoder({.positions_from_past = false}));
  absl::StatusOr<CacheMaskOutcome> out = AddCacheMask(g, Config());
  ASSERT_TRUE(out.ok() && out->added()) << out->refused;
  EXPECT_FALSE(out->rows_share_length);
  ExpectPaddedRowsMatch(*original, g, {0, 3, 7}, 8);
}

TEST(CacheMask, TheUnpaddedModelIsUnchangedWithAMaskOfOnes) {
  std::unique_ptr<Graph> original = Decoder({});
  Graph g = std::move(*Decoder({}));
  ASSERT_TRUE(AddCacheMask(g, Config())->added());
  ExpectPaddedRowsMatch(*original, g, {5}, 5);
}

// What is refused leaves the graph as it was, saying why.
void ExpectRefused(const Form& f, const ModelConfig& config, const std::string& why) {
  Graph g = std::move(*Decoder(f));
  const size_t nodes = g.nodes().size();
  absl::StatusOr<CacheMaskOutcome> out = AddCacheMask(g, config);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_FALSE(out->added());
  EXPECT_NE(out->refused.find(why), std::string::npos) << out->refused;
  EXPECT_NE(out->ToString().find("exact cache lengths"), std::string::npos);
  EXPECT_EQ(g.inputs.size(), f.positions_from_past ? 2u : 3u);
  EXPECT_EQ(g.nodes().size(), nodes);
}

TEST(CacheMask, ASoftmaxWhoseFirstDimIsNotTheBatchIsNotMasked) {
  ExpectRefused({.heads_first = true}, Config(), "no Softmax over the cache's positions");
}

TEST(CacheMask, AModelThatReadsEveryCachedKeyOutsideItsSoftmaxIsRefusedByTheProof) {
  // The padding's zeros move the mean: neither form reproduces the model.
  ExpectRefused({.mean_over_keys = true}, Config(), "does not reproduce the model");
}

TEST(CacheMask, ALengthThatLeavesSizesKnownOnlyAtRunTimeIsRefused) {
  // Position rows sliced at [past, past + sequence): read from the mask, the slice's size is
  // known only when it runs, which would cost the engine its static plan.
  ExpectRefused({.sliced_positions = true}, Config(), "known only at run time");
}

TEST(CacheMask, RowsOfARequestMustShareTheirCacheLength) {
  Tensor mask(DType::kInt64, {2, 6});  // past 4: rows with 3 and 3 real, then 2 and 3
  for (int64_t i : {0, 1, 2, 4, 6, 7, 8, 10}) mask.SetInt(i, 1);
  EXPECT_TRUE(CheckRowsShareLength(mask, 4).ok());
  mask.SetInt(8, 0);
  absl::Status s = CheckRowsShareLength(mask, 4);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("row 1 has 2 cached positions and row 0 has 3"), std::string::npos)
      << s;
  EXPECT_FALSE(CheckRowsShareLength(mask, 7).ok());  // past beyond the mask
}

TEST(CacheMask, OffInTheConfigKeepsTheExport) {
  ModelConfig off = Config();
  off.generation.cache_mask = "off";
  ExpectRefused({}, off, "generation.cache_mask is off");
}

TEST(CacheMask, NothingForAModelWithAMaskOrWithGenerationOff) {
  ModelConfig off = Config();
  off.generation.mode = "off";
  Graph g = std::move(*Decoder({}));
  absl::StatusOr<CacheMaskOutcome> out = AddCacheMask(g, off);
  ASSERT_TRUE(out.ok());
  EXPECT_FALSE(out->added());
  EXPECT_TRUE(out->refused.empty());
  // Once masked, a second pass finds the mask and adds nothing.
  ASSERT_TRUE(AddCacheMask(g, Config())->added());
  absl::StatusOr<CacheMaskOutcome> again = AddCacheMask(g, Config());
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->added());
  EXPECT_TRUE(again->refused.empty());
  EXPECT_NE(CacheMaskKey(Config()), CacheMaskKey(off));
}

// A decoder with a mask of its own that counts its positions from the cache's length
// (server/model/mask_positions.h).
TEST(MaskPositions, PositionsCountedFromTheCacheStartAtTheMasksExtent) {
  std::unique_ptr<Graph> original = Decoder({.own_mask = true});
  Graph g = std::move(*Decoder({.own_mask = true}));
  absl::StatusOr<CacheMaskOutcome> out = AddCacheMask(g, Config());
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_TRUE(out->positions_from_mask) << out->refused;
  EXPECT_FALSE(out->added());
  EXPECT_TRUE(out->reported());
  EXPECT_EQ(out->mask, "attention_mask");
  EXPECT_TRUE(out->rows_share_length);
  EXPECT_EQ(out->past_symbol, "past_sequence_length");
  EXPECT_NE(out->ToString().find("positions read from 'attention_mask'"), std::string::npos);
  EXPECT_EQ(g.inputs.size(), 3u);
  EXPECT_TRUE(IsStatic(*At(g, 2, 6, 3)->FindValue("logits")->shape));
  ExpectPaddedRowsMatch(*original, g, {4, 4}, 9);
  ExpectPaddedRowsMatch(*original, g, {0}, 3);  // a prompt's first step: an empty cache
  ExpectPaddedRowsMatch(*original, g, {5}, 5);  // unpadded
}

// Logits of `g` at 2 rows, a cache of 4 and 2 new positions, under `mask`.
Tensor LogitsUnder(const Graph& g, const Tensor& mask) {
  std::unique_ptr<Graph> at = At(g, 2, 4, 2);
  auto got = ref::Run(*at, {{"input_ids", Tensor::FromInt64({1, 2, 3, 4}, {2, 2})},
                            {"past_key_values.0.key", Random({2, 1, 4, kHidden}, 7)},
                            {"attention_mask", mask}});
  EXPECT_TRUE(got.ok()) << got.status();
  return got.ok() ? got->at("logits") : Tensor();
}

TEST(MaskPositions, AClientMaskGivesTheExportsPositionsWhileARowHoldsItsLastCachedPosition) {
  std::unique_ptr<Graph> original = Decoder({.own_mask = true});
  Graph g = std::move(*Decoder({.own_mask = true}));
  ASSERT_TRUE(AddCacheMask(g, Config())->positions_from_mask);
  Tensor mask = Ones(2, 6);  // [rows, past 4 + new 2]
  mask.SetInt(0, 0);         // row 0 padded on the left
  mask.SetInt(1, 0);
  mask.SetInt(6 + 3, 0);  // row 1 hides its last cached position; row 0 holds it
  ASSERT_TRUE(CheckLastCachedReal(mask, 4).ok());
  Tensor want = LogitsUnder(*original, mask), got = LogitsUnder(g, mask);
  ASSERT_EQ(got.numel(), want.numel());
  for (int64_t i = 0; i < want.numel(); ++i) EXPECT_NEAR(got.GetDouble(i), want.GetDouble(i), 1e-5);
  // Row 0 hides it: the extent is shorter than the cache and the positions move, so a request
  // so is refused.
  mask.SetInt(3, 0);
  mask.SetInt(6 + 3, 1);
  want = LogitsUnder(*original, mask);
  got = LogitsUnder(g, mask);
  double most = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    most = std::max(most, std::abs(got.GetDouble(i) - want.GetDouble(i)));
  }
  EXPECT_GT(most, 1e-3);
  absl::Status s = CheckLastCachedReal(mask, 4);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("row 0 hides its last cached position (column 3)"), std::string::npos)
      << s;
  EXPECT_TRUE(CheckLastCachedReal(mask, 0).ok());   // an empty cache
  EXPECT_FALSE(CheckLastCachedReal(mask, 7).ok());  // past beyond the mask
}

TEST(MaskPositions, ARangeThatAlsoPlacesTheCausalMaskIsRefusedAndTheModelKept) {
  // Read from the mask, query i would sit at extent + i while its own key sits at the padded
  // cache's end: the causal mask would hide it, and the proof sees the logits move.
  Graph g = std::move(*Decoder({.own_mask = true, .causal = true}));
  const size_t nodes = g.nodes().size();
  absl::StatusOr<CacheMaskOutcome> out = AddCacheMask(g, Config());
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_FALSE(out->positions_from_mask);
  EXPECT_FALSE(out->rows_share_length);
  EXPECT_NE(out->refused.find("positions read from the attention mask do not reproduce"),
            std::string::npos)
      << out->refused;
  EXPECT_NE(out->ToString().find("exact cache lengths"), std::string::npos);
  EXPECT_EQ(g.nodes().size(), nodes);
  EXPECT_EQ(g.inputs.size(), 3u);
}

TEST(MaskPositions, NothingForAModelThatPadsAsItIsTakesPositionsOrHasTheRewriteOff) {
  ModelConfig off = Config();
  off.generation.cache_mask = "off";
  const std::vector<std::pair<Form, ModelConfig>> cases{
      // The Range places only the causal mask, which pads as it is: rows of any length.
      {{.own_mask = true, .causal = true, .no_position_term = true}, Config()},
      {{.positions_from_past = false, .own_mask = true}, Config()},
      {{.own_mask = true}, off}};
  for (const auto& [form, config] : cases) {
    Graph g = std::move(*Decoder(form));
    const size_t nodes = g.nodes().size();
    absl::StatusOr<CacheMaskOutcome> out = AddCacheMask(g, config);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_FALSE(out->reported()) << out->ToString();
    EXPECT_EQ(g.nodes().size(), nodes);
  }
}

// Range(s, s + k, d) has ceil(k / d) elements whatever s is; other limits stay unknown.
TEST(RangeShape, ALimitOfStartPlusAConstantGivesAStaticLength) {
  auto length = [](bool same_start, DType dtype, double step) -> std::optional<Shape> {
    GraphBuilder b;
    Value* s = b.Input("s", dtype, Shape{});
    Value* t = b.Input("t", dtype, Shape{});
    Value* k = b.Constant("k", Tensor::Scalar(dtype, 5));
    Value* r = b.Op("Range", {s, b.Op("Add", {same_start ? s : t, k}),
                              b.Constant("d", Tensor::Scalar(dtype, step))});
    b.Output(r);
    std::unique_ptr<Graph> g = b.Build();
    EXPECT_TRUE(shape::InferShapes(*g).ok());
    return g->outputs[0]->shape;
  };
  EXPECT_EQ(length(true, DType::kInt64, 1), (Shape{5}));
  EXPECT_EQ(length(true, DType::kInt32, 2), (Shape{3}));
  EXPECT_EQ(length(true, DType::kInt64, -1), (Shape{0}));
  EXPECT_FALSE(IsStatic(*length(false, DType::kInt64, 1)));   // another start
  EXPECT_FALSE(IsStatic(*length(true, DType::kFloat32, 1)));  // float: s + k - s may not be k
}

// A request written for the export leaves the added mask out: ones of [rows, past + sequence].
TEST(CacheMaskRequest, TheAddedMaskIsOnesWhenLeftOut) {
  ModelSignature sig;
  sig.inputs = {{"input_ids", DType::kInt64, {-1, -1}},
                {"past", DType::kFloat32, {-1, 2, -1, 4}},
                {"attention_mask", DType::kInt64, {-1, -1}}};
  sig.dim_symbols = {{"", "sequence"}, {"", "", "past", ""}, {"", "past + sequence"}};
  sig.default_dims = {{"past", 1}, {"sequence", 1}};
  sig.dim_ranges = {{"past", {0, 64}}, {"sequence", {1, 8}}};
  sig.max_batch_size = 4;
  std::vector<NamedTensor> in{{"input_ids", Tensor(DType::kInt64, {3, 2})},
                              {"past", Tensor(DType::kFloat32, {3, 2, 5, 4})}};
  EXPECT_EQ(ValidateNamedInputs(sig, in).status().code(), absl::StatusCode::kInvalidArgument)
      << "not added by the server: still required";
  sig.ones_when_absent.insert("attention_mask");
  absl::StatusOr<ValidatedInputs> v = ValidateNamedInputs(sig, in);
  ASSERT_TRUE(v.ok()) << v.status();
  const Tensor& mask = v->tensors[2];
  EXPECT_EQ(mask.shape(), (std::vector<int64_t>{3, 7}));
  for (int64_t i = 0; i < mask.numel(); ++i) ASSERT_EQ(mask.GetInt(i), 1);
  EXPECT_EQ(v->dims.at("past"), 5);
  // Given, it is the request's own; another input left out is still refused.
  in.push_back({"attention_mask", Tensor(DType::kInt64, {3, 7})});
  v = ValidateNamedInputs(sig, in);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->tensors[2].GetInt(0), 0);
  in.erase(in.begin());
  absl::Status s = ValidateNamedInputs(sig, in).status();
  EXPECT_NE(s.message().find("missing input 'input_ids'"), std::string::npos) << s;
  // The ones are sized only by inputs already checked: a past of 2^40 carried by a zero dim (a
  // tensor with one needs no bytes) is refused by its spec before anything is allocated, with
  // the zero in the batch or in a fixed dim; a sequence of 9 (the range is [1, 8]), by the range.
  for (const std::vector<int64_t>& past : {std::vector<int64_t>{0, 2, int64_t{1} << 40, 4},
                                           std::vector<int64_t>{3, 0, int64_t{1} << 40, 4}}) {
    std::vector<NamedTensor> huge{{"input_ids", Tensor(DType::kInt64, {past[0], 2})},
                                  {"past", Tensor(DType::kFloat32, past)}};
    s = ValidateNamedInputs(sig, huge).status();
    EXPECT_NE(s.message().find("the model takes"), std::string::npos) << s;
  }
  std::vector<NamedTensor> long_ids{{"input_ids", Tensor(DType::kInt64, {3, 9})},
                                    {"past", Tensor(DType::kFloat32, {3, 2, 5, 4})}};
  s = ValidateNamedInputs(sig, long_ids).status();
  EXPECT_NE(s.message().find("outside the sizes the model serves"), std::string::npos) << s;
  std::vector<NamedTensor> rows{{"input_ids", Tensor(DType::kInt64, {9, 2})},
                                {"past", Tensor(DType::kFloat32, {9, 2, 5, 4})}};
  s = ValidateNamedInputs(sig, rows).status();
  EXPECT_NE(s.message().find("batch of 9 exceeds max_batch_size 4"), std::string::npos) << s;
}

}  // namespace
}  // namespace kiln::server
