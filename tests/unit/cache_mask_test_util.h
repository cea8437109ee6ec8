// A one-head decoder step built in the test, in the forms the decoder rewrites at load take
// or refuse (server/model/cache_mask.h, mask_positions.h), and the check that rows run at their
// own cache lengths on the export match the rewrite run on them padded together.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "compiler/shape/infer.h"
#include "ir/builder.h"
#include "ops/interpreter.h"
#include "server/model/model_config.h"
#include "tests/unit/cpu_engine_util.h"

namespace kiln::server::cache_mask_test {

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
  bool unsqueezed = false;          // positions [1, sequence] (arange(...).unsqueeze(0))
};

inline Value* I64(GraphBuilder& b, const std::string& name, std::vector<int64_t> v,
                  bool scalar = false) {
  const auto n = static_cast<int64_t>(v.size());
  return b.Constant(name, scalar ? Tensor::Scalar(DType::kInt64, static_cast<double>(v[0]))
                                 : Tensor::FromInt64(v, {n}));
}

// A one-head decoder step with past and no attention mask, under the exporters' names; the
// keys are also the values.
inline std::unique_ptr<Graph> Decoder(const Form& f) {
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
    pos = f.unsqueezed ? b.Op("Unsqueeze", {from_past, I64(b, "rows", {0})}) : from_past;
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

inline ModelConfig Config() {
  ModelConfig c;
  c.warmup.int_lo = 0;
  c.warmup.int_hi = kVocab - 1;
  return c;
}

// `g` at `batch` rows and the sizes given, shapes inferred.
inline std::unique_ptr<Graph> At(const Graph& g, int64_t batch, int64_t past, int64_t seq) {
  std::unique_ptr<Graph> s = g.Clone();
  EXPECT_TRUE(
      shape::Specialize(*s, batch, {{"past_sequence_length", past}, {"sequence", seq}}).ok());
  return s;
}

// `feed` less what `g` does not take.
inline ref::TensorMap InputsOf(const Graph& g, ref::TensorMap feed) {
  ref::TensorMap in;
  for (const Value* v : g.inputs) {
    if (feed.count(v->name)) in[v->name] = feed.at(v->name);
  }
  return in;
}

inline Tensor Ones(int64_t rows, int64_t n) {
  Tensor t(DType::kInt64, {rows, n});
  for (int64_t i = 0; i < t.numel(); ++i) t.SetInt(i, 1);
  return t;
}

// Rows at their own cache lengths, run alone on the exported model and together on the masked
// one, padded to a cache of `pad` and 2 new positions (one real): the real logits and presents
// must match.
inline void ExpectPaddedRowsMatch(const Graph& original, const Graph& masked,
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

}  // namespace kiln::server::cache_mask_test
