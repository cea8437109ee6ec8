// Attention and RotaryEmbedding: hand-checked small cases (causal masking, GQA head sharing,
// past caches, fully masked rows), shape rules, and the errors bad shapes and attributes give.
#include <cmath>

#include "tests/unit/op_test_util.h"

namespace kiln {
namespace {

using namespace optest;

TEST(Attention, SingleKeyCopiesItsValue) {
  // One key: the softmax weight is 1 whatever the score, so Y is V.
  const Tensor q = Iota({1, 1, 2, 2}), k = Iota({1, 1, 1, 2}), v = Floats({5, 7}, {1, 1, 1, 2});
  auto r = RunOp("Attention", {q, k, v});
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectValues((*r)[0], {5, 7, 5, 7});
}

TEST(Attention, CausalAndFullyMaskedRows) {
  // Equal scores (Q = 0): causal row i averages values 0..i.
  const Tensor q(DType::kFloat32, {1, 1, 2, 2}), k(DType::kFloat32, {1, 1, 2, 2});
  const Tensor v = Floats({1, 10, 3, 30}, {1, 1, 2, 2});
  auto r = RunOp("Attention", {q, k, v}, {{"is_causal", Int(1)}});
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectValues((*r)[0], {1, 10, 2, 20});
  // A bool mask hiding every key of row 0: zero weights and a zero output, not NaN.
  Tensor mask(DType::kBool, {2, 2});
  mask.mutable_data<bool>()[2] = mask.mutable_data<bool>()[3] = true;
  auto m = RunOp("Attention", {q, k, v, mask}, {{"qk_matmul_output_mode", Int(3)}}, 4);
  ASSERT_TRUE(m.ok()) << m.status();
  ExpectValues((*m)[0], {0, 0, 2, 20});
  ExpectValues((*m)[3], {0, 0, 0.5, 0.5});
}

TEST(Attention, GroupedQueryHeadsSharePastExtendedKv) {
  // 2 query heads share 1 KV head; a past of length 1 is prepended to K/V.
  const Tensor q(DType::kFloat32, {1, 2, 1, 2}), k(DType::kFloat32, {1, 1, 1, 2});
  const Tensor v = Floats({4, 8}, {1, 1, 1, 2});
  const Tensor pk(DType::kFloat32, {1, 1, 1, 2});
  const Tensor pv = Floats({0, 2}, {1, 1, 1, 2});
  auto r = RunOp("Attention", {q, k, v, Tensor(), pk, pv}, {}, 3);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[1].shape(), (std::vector<int64_t>{1, 1, 2, 2}));
  ExpectValues((*r)[0], {2, 5, 2, 5});
  ExpectValues((*r)[2], {0, 2, 4, 8});
}

TEST(Attention, ThreeDInputsSplitHeads) {
  auto s = InferOp("Attention",
                   {{DType::kFloat32, {Dim::Symbol("B"), Dim(4), Dim(24)}},
                    {DType::kFloat32, {Dim::Symbol("B"), Dim(6), Dim(12)}},
                    {DType::kFloat32, {Dim::Symbol("B"), Dim(6), Dim(18)}}},
                   {{"q_num_heads", Int(6)}, {"kv_num_heads", Int(3)}}, 4);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(ShapeToString(*(*s)[0]), ShapeToString(Shape{Dim::Symbol("B"), Dim(4), Dim(36)}));
  EXPECT_EQ(ShapeToString(*(*s)[3]),
            ShapeToString(Shape{Dim::Symbol("B"), Dim(6), Dim(4), Dim(6)}));
  ExpectInvalid(InferOp("Attention",
                        {{DType::kFloat32, {Dim(1), Dim(4), Dim(24)}},
                         {DType::kFloat32, {Dim(1), Dim(6), Dim(12)}},
                         {DType::kFloat32, {Dim(1), Dim(6), Dim(20)}}},
                        {{"q_num_heads", Int(6)}, {"kv_num_heads", Int(3)}})
                    .status());  // 20 features over 3 heads
  auto r = RunOp("Attention", {Iota({1, 2, 4}), Iota({1, 3, 2}), Iota({1, 3, 2})},
                 {{"q_num_heads", Int(2)}, {"kv_num_heads", Int(1)}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].shape(), (std::vector<int64_t>{1, 2, 4}));
}

TEST(Attention, BadShapesAndAttributesAreInvalid) {
  const Tensor q = Iota({1, 3, 2, 4}), k = Iota({1, 2, 2, 4}), v = Iota({1, 2, 2, 4});
  ExpectInvalid(RunOp("Attention", {q, k, v}).status());  // 3 heads over 2
  ExpectInvalid(RunKernel("Attention", {q, k, v}).status());
  ExpectInvalid(RunKernel("Attention", {Iota({1, 2, 4}), Iota({1, 2, 4}), Iota({1, 2, 4})})
                    .status());  // 3-D without head counts
  ExpectInvalid(RunKernel("Attention", {Iota({1, 1, 2, 4}), Iota({1, 1, 2, 3}), Iota({1, 1, 2, 4})})
                    .status());  // head sizes differ
  ExpectInvalid(RunKernel("Attention", {Iota({1, 1, 2, 4}), Iota({1, 1, 2, 4}), Iota({1, 1, 2, 4}),
                                        Iota({3, 3})})
                    .status());  // mask longer than the keys
  ExpectInvalid(RunKernel("Attention", {Iota({1, 1, 2, 4}), Iota({1, 1, 2, 4}), Iota({1, 1, 2, 4}),
                                        Tensor(), Iota({1, 1, 2, 4})})
                    .status());  // past_key without past_value
}

TEST(RotaryEmbedding, RotatesPairsByPosition) {
  // One head of 4 features; position 1 has angle 90 degrees for pair 0 and 0 for pair 1.
  const Tensor x = Floats({1, 2, 3, 4}, {1, 1, 1, 4});
  const Tensor cos = Floats({1, 1, 0, 1}, {2, 2}), sin = Floats({0, 0, 1, 0}, {2, 2});
  const Tensor pos = Ints64({1}, {1, 1});
  auto r = RunOp("RotaryEmbedding", {x, cos, sin, pos});
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectValues((*r)[0], {-3, 2, 1, 4});  // pairs (x0, x2) and (x1, x3)
  auto il = RunOp("RotaryEmbedding", {x, cos, sin, pos}, {{"interleaved", Int(1)}});
  ASSERT_TRUE(il.ok()) << il.status();
  ExpectValues((*il)[0], {-2, 1, 3, 4});  // pairs (x0, x1) and (x2, x3)
}

TEST(RotaryEmbedding, BadCachesAndPositionsAreInvalid) {
  const Tensor x = Iota({1, 1, 1, 4}), cos = Iota({2, 2}), sin = Iota({2, 2});
  ExpectInvalid(RunOp("RotaryEmbedding", {x, cos, sin, Ints64({2}, {1, 1})}).status());
  ExpectInvalid(
      RunOp("RotaryEmbedding", {x, Iota({2, 3}), Iota({2, 3}), Ints64({0}, {1, 1})}).status());
  ExpectInvalid(RunOp("RotaryEmbedding", {x, cos, sin, Ints64({0}, {1, 1})},
                      {{"rotary_embedding_dim", Int(3)}})
                    .status());
  ExpectInvalid(RunOp("RotaryEmbedding", {Iota({1, 1, 4}), cos, sin, Ints64({0}, {1, 1})})
                    .status());  // 3-D without num_heads
}

}  // namespace
}  // namespace kiln
