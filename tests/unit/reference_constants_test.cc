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

// x [2, 256] @ Transpose(w [256, 256]) -> y; also Transpose(w) with perm [0, 1],
// Transpose(small [4, 4]) and Tile(w) (grows) as outputs, and Transpose(x) (reads the input).
std::unique_ptr<Graph> Model(const Tensor& w) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {2, 256});
  Value* wc = b.Constant("w", w);
  const Attribute swap = Attribute::Ints({1, 0});
  b.Output(b.Op("MatMul", {x, b.Op("Transpose", {wc}, {{"perm", swap}})}));
  // The same operator over the same buffer with other attributes: a result of its own.
  b.Output(b.Op("Transpose", {wc}, {{"perm", Attribute::Ints({0, 1})}}));
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
  // The two Transposes of w: the small Transpose reads 64 bytes, Tile doubles its input and
  // Transpose(x) reads the graph input.
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.hits(), 0u);
  auto clone = model->Clone();  // as the check runs a fresh clone at each shape
  auto second = ref::Run(*clone, feed, &cache);
  ASSERT_TRUE(second.ok()) << second.status();
  ExpectSame(*plain, *second);  // each Transpose found its own result
  EXPECT_EQ(cache.hits(), 2u);
  EXPECT_EQ(cache.size(), 2u);
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
  EXPECT_EQ(options.cache->hits(), stored);  // the compile's folds of w, found
  EXPECT_EQ(options.cache->size(), stored);
}

TEST(ReferenceConstants, FindOnlyFindsAndKeepsNothing) {
  const Tensor w = testing::SeededUniform({256, 256}, 1);
  auto model = Model(w);
  const ref::TensorMap feed = {{"x", testing::SeededUniform({2, 256}, 3)}};
  auto cache = std::make_shared<FoldCache>();
  ref::FindOnly view(cache);
  ASSERT_TRUE(ref::Run(*model, feed, &view).ok());
  EXPECT_EQ(cache->size(), 0u);  // nothing kept through the view
  ASSERT_TRUE(ref::Run(*model, feed, cache.get()).ok());
  ASSERT_EQ(cache->size(), 2u);
  auto got = ref::Run(*model, feed, &view);
  auto want = ref::Run(*model, feed);
  ASSERT_TRUE(got.ok() && want.ok());
  ExpectSame(*want, *got);
  EXPECT_EQ(cache->hits(), 2u);  // found through the view
  EXPECT_EQ(cache->size(), 2u);
}

TEST(ReferenceConstants, AnotherBufferIsComputed) {
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
  EXPECT_EQ(cache.size(), 4u);
}

}  // namespace
}  // namespace kiln
