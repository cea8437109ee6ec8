// DFT, STFT, the cosine windows and MelWeightMatrix: short transforms worked by hand (the
// 4-point DFT of 1..4 is [10, -2+2i, -2, -2-2i]), round trips, window values at quarter
// periods, shape rules with constant and run-time sizes, and the errors bad inputs give.
#include "tests/unit/op_test_util.h"

namespace kiln {
namespace {

using namespace optest;

// 1, 2, 3, 4 as a real signal [1, 4, 1].
Tensor Ramp() { return Floats({1, 2, 3, 4}, {1, 4, 1}); }

// Runs one node built at `opset` (the DFT's axis moved from attribute to input at 20).
absl::StatusOr<std::vector<Tensor>> RunAtOpset(int64_t opset, const std::string& op,
                                               const std::vector<Tensor>& inputs, Attrs attrs) {
  GraphBuilder b(opset);
  std::vector<Value*> ins;
  ref::TensorMap feeds;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string name = "in" + std::to_string(i);
    ins.push_back(b.Input(name, inputs[i].dtype(), ToShape(inputs[i].shape())));
    feeds[name] = inputs[i];
  }
  b.Output(b.Op(op, ins, std::move(attrs)));
  std::unique_ptr<Graph> g = b.Build();
  RETURN_IF_ERROR(shape::InferShapes(*g));
  ASSIGN_OR_RETURN(ref::TensorMap result, ref::Run(*g, feeds));
  return std::vector<Tensor>{result[g->outputs[0]->name]};
}

TEST(Dft, FourPointTransformAndOnesided) {
  auto full = RunOp("DFT", {Ramp()});
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_EQ((*full)[0].shape(), (std::vector<int64_t>{1, 4, 2}));
  ExpectValues((*full)[0], {10, 0, -2, 2, -2, 0, -2, -2});
  // Onesided keeps bins 0 .. L / 2: the rest are conjugates.
  auto half = RunOp("DFT", {Ramp()}, {{"onesided", Int(1)}});
  ASSERT_TRUE(half.ok()) << half.status();
  EXPECT_EQ((*half)[0].shape(), (std::vector<int64_t>{1, 3, 2}));
  ExpectValues((*half)[0], {10, 0, -2, 2, -2, 0});
}

TEST(Dft, InverseRoundTripAndIrfft) {
  auto spec = RunOp("DFT", {Ramp()});
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto back = RunOp("DFT", {(*spec)[0]}, {{"inverse", Int(1)}});
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectValues((*back)[0], {1, 0, 2, 0, 3, 0, 4, 0});
  // The half spectrum [10, -2+2i, -2] rebuilds a real signal of 2 * (3 - 1) = 4 samples.
  auto real = RunOp("DFT", {Floats({10, 0, -2, 2, -2, 0}, {1, 3, 2})},
                    {{"inverse", Int(1)}, {"onesided", Int(1)}});
  ASSERT_TRUE(real.ok()) << real.status();
  EXPECT_EQ((*real)[0].shape(), (std::vector<int64_t>{1, 4, 1}));
  ExpectValues((*real)[0], {1, 2, 3, 4});
}

TEST(Dft, DftLengthPadsOrTruncates) {
  // [1, 2] padded to 4: X[k] = 1 + 2 (-i)^k.
  auto pad = RunOp("DFT", {Floats({1, 2}, {1, 2, 1}), Ints64({4}, {})});
  ASSERT_TRUE(pad.ok()) << pad.status();
  ExpectValues((*pad)[0], {3, 0, 1, -2, -1, 0, 1, 2});
  auto cut = RunOp("DFT", {Ramp(), Ints64({2}, {})});
  ASSERT_TRUE(cut.ok()) << cut.status();
  ExpectValues((*cut)[0], {3, 0, -1, 0});
}

TEST(Dft, AxisAttributeBeforeOpset20AndInputAfter) {
  // Rows [1, 2] and [3, 4] transformed along axis 2: [3, -1] and [7, -1].
  const Tensor x = Floats({1, 2, 3, 4}, {1, 2, 2, 1});
  const std::vector<double> want{3, 0, -1, 0, 7, 0, -1, 0};
  auto v17 = RunAtOpset(17, "DFT", {x}, {{"axis", Int(2)}});
  ASSERT_TRUE(v17.ok()) << v17.status();
  ExpectValues((*v17)[0], want);
  auto v20 = RunOp("DFT", {x, Tensor(), Ints64({-2}, {})});
  ASSERT_TRUE(v20.ok()) << v20.status();
  ExpectValues((*v20)[0], want);
}

TEST(Dft, BadShapesAxesAndLengthsAreInvalid) {
  ExpectInvalid(RunOp("DFT", {Iota({1, 4, 3})}).status());
  ExpectInvalid(RunKernel("DFT", {Iota({4})}).status());
  ExpectInvalid(RunOp("DFT", {Ramp(), Tensor(), Ints64({2}, {})}).status());
  ExpectInvalid(RunOp("DFT", {Ramp(), Tensor(), Ints64({-1}, {})}).status());
  ExpectInvalid(RunAtOpset(17, "DFT", {Ramp()}, {{"axis", Int(2)}}).status());
  ExpectInvalid(RunOp("DFT", {Ramp(), Ints64({0}, {})}).status());
  ExpectInvalid(RunOp("DFT", {Iota({1, 4, 2})}, {{"onesided", Int(1)}}).status());
  // irfft of a single bin has no default length.
  ExpectInvalid(
      RunOp("DFT", {Iota({1, 1, 2})}, {{"inverse", Int(1)}, {"onesided", Int(1)}}).status());
}

TEST(Dft, ShapeRuleUsesConstantLength) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, ToShape({2, 10, 1}));
  Value* len = b.Constant("len", Tensor::FromInt64({16}, {}));
  b.Output(b.Op("DFT", {x, len}, {{"onesided", Int(1)}}));
  std::unique_ptr<Graph> g = b.Build();
  ASSERT_TRUE(shape::InferShapes(*g).ok());
  EXPECT_EQ(StaticDims(*g->outputs[0]->shape), (std::vector<int64_t>{2, 9, 2}));
  // A run-time length leaves the axis unknown.
  auto s = InferOp("DFT", {{DType::kFloat32, ToShape({2, 10, 1})}, {DType::kInt64, {}}});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_FALSE((*(*s)[0])[1].known());
  EXPECT_EQ((*(*s)[0])[2].value, 2);
}

TEST(Stft, FramesOfARampWithAndWithoutWindow) {
  // Frames [1, 2, 3, 4] and [3, 4, 5, 6]; onesided keeps 3 bins.
  const Tensor sig = Floats({1, 2, 3, 4, 5, 6}, {1, 6, 1});
  auto r = RunOp("STFT", {sig, Ints64({2}, {}), Tensor(), Ints64({4}, {})});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].shape(), (std::vector<int64_t>{1, 2, 3, 2}));
  ExpectValues((*r)[0], {10, 0, -2, 2, -2, 0, 18, 0, -2, 2, -2, 0});
  // Window [0, 1, 1, 0]: the frames become [0, 2, 3, 0] and [0, 4, 5, 0]; all 4 bins kept.
  auto w = RunOp("STFT", {sig, Ints64({2}, {}), Floats({0, 1, 1, 0}, {4})}, {{"onesided", Int(0)}});
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ((*w)[0].shape(), (std::vector<int64_t>{1, 2, 4, 2}));
  ExpectValues((*w)[0], {5, 0, -3, -2, 1, 0, -3, 2, 9, 0, -5, -4, 1, 0, -5, 4});
}

TEST(Stft, BadStepsFramesAndShapesAreInvalid) {
  const Tensor sig = Iota({1, 6, 1});
  ExpectInvalid(RunOp("STFT", {sig, Ints64({0}, {}), Tensor(), Ints64({4}, {})}).status());
  ExpectInvalid(RunOp("STFT", {sig, Ints64({1}, {}), Tensor(), Ints64({8}, {})}).status());
  ExpectInvalid(RunOp("STFT", {Iota({6, 1}), Ints64({1}, {}), Tensor(), Ints64({4}, {})}).status());
  ExpectInvalid(RunOp("STFT", {sig, Ints64({1}, {}), Iota({3}), Ints64({4}, {})}).status());
  ExpectInvalid(RunKernel("STFT", {sig, Ints64({1}, {})}).status());
}

TEST(Windows, ValuesAtQuarterPeriods) {
  const Tensor four = Ints64({4}, {});
  auto hann = RunOp("HannWindow", {four});
  ASSERT_TRUE(hann.ok()) << hann.status();
  ExpectValues((*hann)[0], {0, 0.5, 1, 0.5});
  // Symmetric: N = size - 1, so both ends are 0.
  auto sym = RunOp("HannWindow", {Ints64({5}, {})}, {{"periodic", Int(0)}});
  ASSERT_TRUE(sym.ok()) << sym.status();
  ExpectValues((*sym)[0], {0, 0.5, 1, 0.5, 0});
  auto hamming = RunOp("HammingWindow", {four});
  ASSERT_TRUE(hamming.ok()) << hamming.status();
  ExpectValues((*hamming)[0], {4.0 / 46, 25.0 / 46, 1, 25.0 / 46});
  auto blackman = RunOp("BlackmanWindow", {four}, {{"output_datatype", Int(11)}});
  ASSERT_TRUE(blackman.ok()) << blackman.status();
  EXPECT_EQ((*blackman)[0].dtype(), DType::kFloat64);
  ExpectValues((*blackman)[0], {0, 0.34, 1, 0.34}, 1e-12);
}

TEST(Windows, ShapeRuleAndBadSizes) {
  GraphBuilder b;
  b.Output(b.Op("HammingWindow", {b.Constant("n", Tensor::FromInt64({7}, {}))}));
  std::unique_ptr<Graph> g = b.Build();
  ASSERT_TRUE(shape::InferShapes(*g).ok());
  EXPECT_EQ(StaticDims(*g->outputs[0]->shape), (std::vector<int64_t>{7}));
  ExpectInvalid(RunOp("HannWindow", {Ints64({0}, {})}).status());
  ExpectInvalid(RunOp("BlackmanWindow", {Ints64({-3}, {})}).status());
  ExpectInvalid(RunOp("HannWindow", {Ints64({4}, {})}, {{"output_datatype", Int(8)}}).status());
}

TEST(MelWeightMatrix, OneBandByHand) {
  // mel(4000 Hz) / 3 steps puts the edges at 0, 620 and 1791 Hz: bins 0, 0 and 2 of a
  // 9-point grid over 8000 Hz, so the band is 1 at bin 0 and falls to 0.5 at bin 1.
  const Tensor rate = Ints64({8000}, {});
  const Tensor lo = Floats({0}, {}), hi = Floats({4000}, {});
  auto r = RunOp("MelWeightMatrix", {Ints64({1}, {}), Ints64({8}, {}), rate, lo, hi});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].shape(), (std::vector<int64_t>{5, 1}));
  ExpectValues((*r)[0], {1, 0.5, 0, 0, 0});
  ExpectInvalid(
      RunOp("MelWeightMatrix", {Ints64({0}, {}), Ints64({8}, {}), rate, lo, hi}).status());
  ExpectInvalid(
      RunOp("MelWeightMatrix", {Ints64({1}, {}), Ints64({8}, {}), rate, lo, Floats({40000}, {})})
          .status());
  ExpectInvalid(
      RunOp("MelWeightMatrix", {Ints64({1}, {}), Ints64({8}, {}), rate, hi, lo}).status());
}

}  // namespace
}  // namespace kiln
