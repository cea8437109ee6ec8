// The reference interpreter's kept results of nodes over constants (ops/constant_results.h):
// a run with the model's FoldCache finds what the compile's constant folding stored (same
// operator, attributes and input buffers) and keeps what it computes itself, with outputs
// equal to a run without it. Not kept: nodes reading a graph input, reading under 64 KiB or
// growing past their inputs; nor found for another buffer.
#include <gtest/gtest.h>

#include <cstring>

#include "compiler/passes/fold_cache.h"
#include "compiler/passes/fold_constants.h"
#include "compiler/shape/infer.h"
#include "ir/builder.h"
#include "ops/interpreter.h"
#include "tests/unit/test_tensors.h"

namespace kiln {
namespace {

using passes::FoldCache;

// x [2, 256] @ Transpose(w [256, 256]) -> y; also Transpose(small [4, 4]) and Tile(w) (grows)
// as outputs, and Transpose(x) (reads the input).
std::unique_ptr<Graph> Model(const Tensor& w) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {2, 256});
  Value* wc = b.Constant("w", w);
  const Attribute swap = Attribute::Ints({1, 0});
  b.Output(b.Op("MatMul", {x, b.Op("Transpose", {wc}, {{"perm", swap}})}));
  b.Output(b.Op("Transpose", {b.Constant("small", testing::SeededUniform({4, 4}, 2))},
                {{"perm", swap}}));
  b.Output(b.Op("Tile", {wc, b.Constant("reps", Tensor::FromInt64({2, 1}, {2}))}));
  b.Output(b.Op("Transpose", {x}, {{"perm", swap}}));
  auto g = b.Build();
  shape::InferOptions no_fold;  // shapes for the folding pass, no folding in inference
  no_fold.max_fold_elements = 0;
  EXPECT_TRUE(shape::InferShapes(*g, no_fold).ok());
  return g;
}

void ExpectSame(const ref::TensorMap& a, const ref::TensorMap& b) {
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a) {
    const Tensor& u = b.at(name);
    ASSERT_EQ(t.shape(), u.shape()) << name;
    EXPECT_EQ(std::memcmp(t.raw(), u.raw(), t.nbytes()), 0) << name;
  }
}

TEST(ReferenceConstants, KeptOnceThenFoundWithTheSameBits) {
  const Tensor w = testing::SeededUniform({256, 256}, 1);
  auto model = Model(w);
  const ref::TensorMap feed = {{"x", testing::SeededUniform({2, 256}, 3)}};
  auto plain = ref::Run(*model, feed);
  ASSERT_TRUE(plain.ok()) << plain.status();
  FoldCache cache;
  auto first = ref::Run(*model, feed, &cache);
  ASSERT_TRUE(first.ok()) << first.status();
  ExpectSame(*plain, *first);
  // Only the transposed weights: the small Transpose reads 64 bytes, Tile doubles its input
  // and Transpose(x) reads the graph input.
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_EQ(cache.hits(), 0u);
  auto clone = model->Clone();  // as the check runs a fresh clone at each shape
  auto second = ref::Run(*clone, feed, &cache);
  ASSERT_TRUE(second.ok()) << second.status();
  ExpectSame(*plain, *second);
  EXPECT_EQ(cache.hits(), 1u);
  EXPECT_EQ(cache.size(), 1u);
}

TEST(ReferenceConstants, FindsTheCompilesFold) {
  const Tensor w = testing::SeededUniform({256, 256}, 1);
  auto model = Model(w);
  passes::FoldConstantsOptions options;
  options.cache = std::make_shared<FoldCache>();
  auto compiled = model->Clone();
  ASSERT_TRUE(passes::FoldConstants(*compiled, options).ok());
  const size_t stored = options.cache->size();
  ASSERT_GE(stored, 1u);
  const ref::TensorMap feed = {{"x", testing::SeededUniform({2, 256}, 3)}};
  auto got = ref::Run(*model, feed, options.cache.get());
  auto want = ref::Run(*model, feed);
  ASSERT_TRUE(got.ok() && want.ok());
  ExpectSame(*want, *got);
  EXPECT_EQ(options.cache->hits(), 1u);  // the weights' Transpose, folded by the compile
  EXPECT_EQ(options.cache->size(), stored);
}

TEST(ReferenceConstants, AnotherBufferWithEqualValuesIsComputed) {
  const Tensor w = testing::SeededUniform({256, 256}, 1);
  FoldCache cache;
  const ref::TensorMap feed = {{"x", testing::SeededUniform({2, 256}, 3)}};
  ASSERT_TRUE(ref::Run(*Model(w), feed, &cache).ok());
  Tensor changed = w.Clone();  // another buffer: must not find w's entry
  changed.mutable_data<float>()[1] = 1000.f;
  auto got = ref::Run(*Model(changed), feed, &cache);
  auto want = ref::Run(*Model(changed), feed);
  ASSERT_TRUE(got.ok() && want.ok());
  ExpectSame(*want, *got);
  EXPECT_EQ(cache.hits(), 0u);
  EXPECT_EQ(cache.size(), 2u);
}

}  // namespace
}  // namespace kiln
