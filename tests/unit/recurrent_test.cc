// RNN, GRU and LSTM on the reference: one-unit cells computed by hand (initial state,
// sequence_lens, both directions, layout 1), shape rules, and the errors bad W shapes and
// attributes give.
#include <cmath>

#include "tests/unit/op_test_util.h"

namespace kiln {
namespace {

using namespace optest;

Tensor Ints32(std::vector<double> v, std::vector<int64_t> shape) {
  return Typed(DType::kInt32, v, std::move(shape));
}

// h_t = tanh(2 x_t + 0.5 h_{t-1}); the reverse direction walks the sequence backwards.
TEST(Rnn, OneUnitByHandInBothDirections) {
  const Tensor x = Floats({1, 1}, {2, 1, 1});
  const Tensor w = Floats({2, 2}, {2, 1, 1}), r = Floats({0.5f, 0.5f}, {2, 1, 1});
  auto out = RunOp("RNN", {x, w, r}, {{"hidden_size", Int(1)}, {"direction", Str("bidirectional")}},
                   2);
  ASSERT_TRUE(out.ok()) << out.status();
  const double h1 = std::tanh(2.0), h2 = std::tanh(2.0 + 0.5 * h1);
  EXPECT_EQ((*out)[0].shape(), (std::vector<int64_t>{2, 2, 1, 1}));
  // Y[t][d]: forward sees h1 then h2; reverse reaches h1 at the last step, h2 at the first.
  ExpectValues((*out)[0], {h1, h2, h2, h1});
  ExpectValues((*out)[1], {h2, h2});
}

// With W, R and B zero every GRU gate is 0.5 and the candidate 0: h halves each step. A
// sequence length of 1 stops the second batch row after one step, its later Y zero.
TEST(Gru, InitialStateAndSequenceLengths) {
  const Tensor x = Floats({0, 0, 0, 0}, {2, 2, 1});
  const Tensor w = Floats({0, 0, 0}, {1, 3, 1}), r = Floats({0, 0, 0}, {1, 3, 1});
  const Tensor b = Floats({0, 0, 0, 0, 0, 0}, {1, 6});
  const Tensor lens = Ints32({2, 1}, {2}), h0 = Floats({2, 8}, {1, 2, 1});
  for (int64_t lbr : {0, 1}) {
    auto out = RunOp("GRU", {x, w, r, b, lens, h0},
                     {{"hidden_size", Int(1)}, {"linear_before_reset", Int(lbr)}}, 2);
    ASSERT_TRUE(out.ok()) << out.status();
    ExpectValues((*out)[0], {1, 4, 0.5, 0});
    ExpectValues((*out)[1], {0.5, 4});
  }
}

// input_forget couples the gates (f = 1 - i); with every pre-activation zero, i = f = o =
// 0.5 and the candidate 0, so c halves and h = 0.5 tanh(c). Layout 1 puts batch first.
TEST(Lstm, CellStateAndBatchFirstLayout) {
  const Tensor x = Floats({0, 0}, {1, 2, 1});  // (batch 1, seq 2, input 1)
  const Tensor w = Floats({0, 0, 0, 0}, {1, 4, 1}), r = Floats({0, 0, 0, 0}, {1, 4, 1});
  const Tensor h0 = Floats({0}, {1, 1, 1}), c0 = Floats({4}, {1, 1, 1});
  auto out = RunOp("LSTM", {x, w, r, Tensor(), Tensor(), h0, c0},
                   {{"hidden_size", Int(1)}, {"layout", Int(1)}}, 3);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].shape(), (std::vector<int64_t>{1, 2, 1, 1}));
  ExpectValues((*out)[0], {0.5 * std::tanh(2.0), 0.5 * std::tanh(1.0)});
  ExpectValues((*out)[2], {1});
}

TEST(Recurrent, ShapeRules) {
  auto s = InferOp("LSTM", {{DType::kFloat32, Shape{Dim(7), Dim(3), Dim(5)}},
                            {DType::kFloat32, Shape{Dim(2), Dim(16), Dim(5)}},
                            {DType::kFloat32, Shape{Dim(2), Dim(16), Dim(4)}}},
                   {{"direction", Str("bidirectional")}}, 3);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(ShapeToString(*(*s)[0]), ShapeToString(Shape{Dim(7), Dim(2), Dim(3), Dim(4)}));
  EXPECT_EQ(ShapeToString(*(*s)[2]), ShapeToString(Shape{Dim(2), Dim(3), Dim(4)}));
  auto sym = InferOp("GRU", {{DType::kFloat32, Shape{Dim(3), Dim::Symbol("seq"), Dim(5)}},
                             {DType::kFloat32, Shape{Dim(1), Dim(12), Dim(5)}},
                             {DType::kFloat32, Shape{Dim(1), Dim(12), Dim(4)}}},
                     {{"layout", Int(1)}}, 2);
  ASSERT_TRUE(sym.ok()) << sym.status();
  EXPECT_EQ(ShapeToString(*(*sym)[0]), ShapeToString(Shape{Dim(3), Dim::Symbol("seq"), Dim(1), Dim(4)}));
}

TEST(Recurrent, BadShapesAndAttributesAreInvalid) {
  const std::pair<DType, Shape> x{DType::kFloat32, Shape{Dim(2), Dim(1), Dim(3)}};
  const std::pair<DType, Shape> w{DType::kFloat32, Shape{Dim(1), Dim(8), Dim(3)}};
  const std::pair<DType, Shape> r{DType::kFloat32, Shape{Dim(1), Dim(8), Dim(2)}};
  EXPECT_TRUE(InferOp("LSTM", {x, w, r}, {}, 3).ok());
  // hidden_size 3 needs 12 LSTM rows; 8 rows are not whole GRU gates; 2 directions expected.
  ExpectInvalid(InferOp("LSTM", {x, w, r}, {{"hidden_size", Int(3)}}, 3).status());
  ExpectInvalid(InferOp("GRU", {x, w, r}, {}, 2).status());
  ExpectInvalid(InferOp("LSTM", {x, w, r}, {{"direction", Str("bidirectional")}}, 3).status());
  ExpectInvalid(InferOp("LSTM", {x, w, r}, {{"direction", Str("sideways")}}, 3).status());
  ExpectInvalid(InferOp("LSTM", {x, w, r}, {{"layout", Int(2)}}, 3).status());
  ExpectInvalid(InferOp("RNN", {{DType::kFloat32, Shape{Dim(2), Dim(3)}}, w, r}, {}, 2).status());
  // X's input size 3 against W's 4.
  ExpectInvalid(InferOp("RNN", {x, {DType::kFloat32, Shape{Dim(1), Dim(2), Dim(4)}}, r}, {}, 2).status());
  // The kernel refuses operands whose sizes disagree even without shape inference.
  ExpectInvalid(RunKernel("RNN", {Iota({2, 1, 3}), Iota({1, 2, 4}), Iota({1, 2, 2})}).status());
}

}  // namespace
}  // namespace kiln
