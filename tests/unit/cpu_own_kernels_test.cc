// The CPU engine's own kernels against the reference interpreter (element-wise programs,
// softmax, LayerNorm, data movement, reductions, casts, Where, Pad, Resize, recurrent cells)
// and what each leaves to the reference.
#include <cmath>
#include <cstring>

#include "gtest/gtest.h"
#include "tests/unit/cpu_engine_util.h"

namespace kiln {
namespace {

using namespace cpu_test;  // NOLINT: the shared checks read as part of this file

TEST(CpuEngineOwnKernels, ElementwiseBroadcastClipAndStrides) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {3, 1, 300});  // tiles cross 256
  Value* y = b.Input("y", DType::kFloat32, {4, 1});
  Value* lo = b.Constant("lo", Tensor::FromFloat({-0.3f}));
  Value* hi = b.Constant("hi", Tensor::FromFloat({0.4f}));
  b.Output(b.Op("Clip", {b.Op("Mul", {x, y}), lo, hi}));
  b.Output(b.Op("Sub", {y, x}));
  b.Output(b.Op("Erf", {x}));
  ExpectMatchesReference(b.Build());
}

TEST(CpuEngineOwnKernels, ElementwiseSplitsLargeOutputsAcrossThreads) {
  // Above the parallel threshold in both walks: packed short rows ([2048, 40]) and long rows
  // ([3, 40000]), with broadcast operands and a fused program (O2) that runs in place.
  GraphBuilder b;
  Value* s = b.Input("s", DType::kFloat32, {2048, 40});
  Value* col = b.Input("col", DType::kFloat32, {2048, 1});
  Value* l = b.Input("l", DType::kFloat32, {3, 40000});
  Value* row = b.Input("row", DType::kFloat32, {40000});
  b.Output(b.Op("Tanh", {b.Op("Mul", {b.Op("Add", {s, col}), s})}));
  b.Output(b.Op("Sigmoid", {b.Op("Sub", {l, row})}));
  b.Output(b.Op(
      "Mul",
      {col, b.Op("Transpose",
                 {b.Op("Reshape", {s, b.Constant("sh", Tensor::FromInt64({40, 2048}, {2}))})})}));
  Outcome o = ExpectMatchesReference(b.Build(), /*max_fallbacks=*/0, OptLevel::kO2);
  ASSERT_TRUE(o.engine);
  EXPECT_GE(o.compiled.report.op_types_after.count("ai.kiln.FusedElementwise"), 1u);
}

TEST(CpuEngineOwnKernels, SoftmaxLayerNormTransposeGather) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {2, 5, 6});
  Value* ids = b.Input("ids", DType::kInt64, {2, 3});
  b.Output(b.Op("Softmax", {x}, {{"axis", Attribute::Int(1)}}));
  b.Output(b.Op("Softmax", {x}));
  b.Output(b.Op("LayerNormalization",
                {x, b.Constant("g", Random({6}, 30)), b.Constant("bb", Random({6}, 31))},
                {{"epsilon", Attribute::Float(1e-3f)}}));
  b.Output(b.Op("Transpose", {x}, {{"perm", Ints({1, 2, 0})}}));
  b.Output(b.Op("Concat", {x, b.Constant("k", Random({2, 2, 6}, 33)), x},
                {{"axis", Attribute::Int(1)}}));
  // Random int64 inputs are 0..10: the table has 12 rows.
  b.Output(b.Op("Gather", {b.Constant("tab", Random({3, 12, 2}, 32)), ids},
                {{"axis", Attribute::Int(1)}}));
  ExpectMatchesReference(b.Build());
}

TEST(CpuEngineOwnKernels, ReductionsOverAnyAxesKeptOrNot) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {3, 4, 5, 6});
  Value* big = b.Input("big", DType::kFloat32, {64, 32, 40});  // splits across threads
  int n = 0;
  auto reduce = [&](const char* op, Value* in, std::vector<int64_t> axes, int keepdims) {
    const int64_t count = static_cast<int64_t>(axes.size());
    Value* a = b.Constant("axes" + std::to_string(n++), Tensor::FromInt64(axes, {count}));
    b.Output(b.Op(op, {in, a}, {{"keepdims", Attribute::Int(keepdims)}}));
  };
  reduce("ReduceSum", x, {1}, 1);
  reduce("ReduceMean", x, {2, 3}, 0);
  reduce("ReduceMax", x, {0, 2}, 1);
  reduce("ReduceMin", x, {-1}, 0);
  reduce("ReduceProd", x, {1, 3}, 1);
  reduce("ReduceSumSquare", x, {0, 1, 2, 3}, 0);
  reduce("ReduceL1", x, {0, 3}, 1);
  reduce("ReduceL2", x, {0}, 0);
  reduce("ReduceLogSum", b.Op("Exp", {x}), {2}, 1);
  reduce("ReduceMean", big, {2}, 1);
  reduce("ReduceSum", big, {1}, 0);
  reduce("ReduceMax", big, {0}, 0);
  // No axes: everything, unless noop_with_empty_axes (then each element alone: squared).
  b.Output(b.Op("ReduceMean", {x}, {{"keepdims", Attribute::Int(0)}}));
  b.Output(b.Op("ReduceSumSquare", {x}, {{"noop_with_empty_axes", Attribute::Int(1)}}));
  Outcome o = ExpectMatchesReference(b.Build(), /*max_fallbacks=*/0);
  ASSERT_TRUE(o.engine);
  EXPECT_EQ(o.engine->info().fallback_ops, 0);
}

TEST(CpuEngineOwnKernels, SliceWithStepsAxesAndClamping) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {4, 7, 6});
  Value* ids = b.Input("ids", DType::kInt64, {3, 9});
  int n = 0;
  auto c = [&](std::vector<int64_t> v) {
    const int64_t size = static_cast<int64_t>(v.size());
    return b.Constant("c" + std::to_string(n++), Tensor::FromInt64(v, {size}));
  };
  b.Output(b.Op("Slice", {x, c({1, 0}), c({3, 100}), c({0, 2}), c({1, 2})}));  // ends clamp
  b.Output(b.Op("Slice", {x, c({-1}), c({-100}), c({1}), c({-2})}));           // backwards
  b.Output(b.Op("Slice", {x, c({0, -3}), c({2, 6})}));                         // default axes
  b.Output(b.Op("Slice", {ids, c({2}), c({8}), c({-1}), c({3})}));             // int64, axis -1
  Outcome o = ExpectMatchesReference(b.Build(), /*max_fallbacks=*/0);
  ASSERT_TRUE(o.engine);
  EXPECT_EQ(o.engine->info().fallback_ops, 0);
}

TEST(CpuEngineOwnKernels, CastSaturatesTruncatesAndKeepsNaNRules) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {4, 5});
  Value* ids = b.Input("ids", DType::kInt64, {4, 5});
  Value* m = b.Input("m", DType::kBool, {4, 5});
  auto cast = [&](Value* v, int to) { return b.Op("Cast", {v}, {{"to", Attribute::Int(to)}}); };
  Value* big = b.Op("Mul", {x, b.Constant("k", Tensor::FromFloat({1e10f}))});
  Value* nan = b.Op("Sqrt", {x});  // NaN for the negative half
  b.Output(cast(big, 6));          // float -> int32, saturating
  b.Output(cast(x, 7));            // float -> int64, toward zero
  b.Output(cast(nan, 7));          // NaN -> 0
  b.Output(cast(nan, 9));          // NaN -> true
  b.Output(cast(ids, 1));          // int64 -> float
  b.Output(cast(ids, 3));          // int64 -> int8
  b.Output(cast(m, 1));            // bool -> float
  b.Output(cast(x, 11));           // float -> double
  Outcome o = ExpectMatchesReference(b.Build(), /*max_fallbacks=*/0);
  ASSERT_TRUE(o.engine);
  EXPECT_EQ(o.engine->info().fallback_ops, 0);
}

TEST(CpuEngineOwnKernels, FusedProgramsCastIntegerAndBoolInputsOnLoad) {
  // An attention mask's preprocessing, fused at O2: the int64 (and bool) inputs enter the
  // float program through its Cast instructions.
  GraphBuilder b;
  Value* mask = b.Input("mask", DType::kInt64, {2, 1, 1, 5});
  Value* keep = b.Input("keep", DType::kBool, {2, 1, 5, 1});
  Value* scores = b.Input("scores", DType::kFloat32, {2, 3, 5, 5});
  auto to_float = [&](Value* v) { return b.Op("Cast", {v}, {{"to", Attribute::Int(1)}}); };
  Value* one = b.Constant("one", Tensor::FromFloat({1.f}));
  Value* add = b.Op(
      "Mul", {b.Op("Sub", {one, to_float(mask)}), b.Constant("neg", Tensor::FromFloat({-1e4f}))});
  Value* gated = b.Op("Mul", {b.Op("Add", {scores, add}), to_float(keep)});
  b.Output(b.Op("Softmax", {gated}));
  Outcome o = ExpectMatchesReference(b.Build(), /*max_fallbacks=*/0, OptLevel::kO2);
  ASSERT_TRUE(o.engine);
  EXPECT_GE(o.compiled.report.op_types_after.count("ai.kiln.FusedElementwise"), 1u);
  EXPECT_EQ(o.compiled.report.op_types_after.count("Cast"), 0u);  // inside the program
}

TEST(CpuEngineOwnKernels, WhereBroadcastsAllThreeOperands) {
  GraphBuilder b;
  Value* c = b.Input("c", DType::kBool, {4, 1});
  Value* x = b.Input("x", DType::kFloat32, {1, 6});
  Value* cc = b.Input("cc", DType::kBool, {2, 4, 6});
  Value* ids = b.Input("ids", DType::kInt64, {4, 6});
  b.Output(b.Op("Where", {c, x, b.Constant("neg", Tensor::FromFloat({-1e9f}))}));
  b.Output(b.Op("Where", {cc, ids, b.Constant("z", Tensor::FromInt64({0, 1, 2, 3, 4, 5}, {6}))}));
  Outcome o = ExpectMatchesReference(b.Build(), /*max_fallbacks=*/0);
  ASSERT_TRUE(o.engine);
  EXPECT_EQ(o.engine->info().fallback_ops, 0);
}

TEST(CpuEngineOwnKernels, SplitAndExpandAnyElementType) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {4, 9, 3});
  Value* ids = b.Input("ids", DType::kInt64, {3, 1});
  Value* sizes = b.Constant("sizes", Tensor::FromInt64({2, 4, 3}, {3}));
  for (Value* part : b.OpN("Split", {x, sizes}, 3, {{"axis", Attribute::Int(1)}})) b.Output(part);
  b.Output(b.Op("Expand", {ids, b.Constant("shape", Tensor::FromInt64({2, 3, 5}, {3}))}));
  Outcome o = ExpectMatchesReference(b.Build(), /*max_fallbacks=*/0);
  ASSERT_TRUE(o.engine);
  EXPECT_EQ(o.engine->info().fallback_ops, 0);
}

TEST(CpuEngineOwnKernels, PadEveryModeCropsAndAxes) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {2, 3, 4});
  Value* ids = b.Input("ids", DType::kInt64, {3, 5});
  int n = 0;
  auto c = [&](std::vector<int64_t> v) {
    const int64_t size = static_cast<int64_t>(v.size());
    return b.Constant("c" + std::to_string(n++), Tensor::FromInt64(v, {size}));
  };
  auto mode = [](const char* m) {
    return std::map<std::string, Attribute>{{"mode", Attribute::String(m)}};
  };
  Value* value = b.Constant("v", Tensor::Scalar(DType::kFloat32, 2.5));
  b.Output(b.Op("Pad", {x, c({0, 1, 2, 1, 0, 3}), value}, mode("constant")));
  b.Output(b.Op("Pad", {x, c({0, 2, 5, 0, 2, 6})}, mode("reflect")));  // wider than the axis
  b.Output(b.Op("Pad", {x, c({1, 0, 1, 1, 3, 2})}, mode("edge")));
  b.Output(b.Op("Pad", {x, c({0, 4, 1, 0, 1, 7})}, mode("wrap")));
  b.Output(b.Op("Pad", {x, c({0, -1, 2, 0, -1, -1})}, mode("constant")));  // crops too
  b.Output(b.Op("Pad", {x, c({0, -1, 2, 0, -2, -1})}, mode("reflect")));   // to nothing
  b.Output(b.Op("Pad", {x, c({1, 2}), nullptr, c({-1})}, mode("edge")));   // axes input
  b.Output(b.Op("Pad", {ids, c({1, 0, 0, 2})}, mode("reflect")));          // int64
  Outcome o = ExpectMatchesReference(b.Build(), /*max_fallbacks=*/0);
  ASSERT_TRUE(o.engine);
  EXPECT_EQ(o.engine->info().fallback_ops, 0);
}

// A constant value fed at run time has no bytes at build: the reference runs that Pad.
TEST(CpuEngineOwnKernels, PadWithARuntimeValueFallsBack) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {2, 3});
  Value* value = b.Input("value", DType::kFloat32, {});
  b.Output(b.Op("Pad", {x, b.Constant("p", Tensor::FromInt64({1, 0, 0, 2}, {4})), value}));
  Outcome o = ExpectMatchesReference(b.Build(), /*max_fallbacks=*/1);
  ASSERT_TRUE(o.engine);
  EXPECT_EQ(o.engine->info().fallback_ops, 1);
}

// Resize with constant scales/sizes runs the reference's own taps: nearest on any dtype,
// linear and cubic on float32, each coordinate transform, antialias and extrapolation.
TEST(CpuEngineOwnKernels, ResizeModesAndCoordinateTransforms) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {1, 2, 5, 6});
  Value* ids = b.Input("ids", DType::kInt64, {2, 3, 4});
  int n = 0;
  auto floats = [&](std::vector<float> v) {
    const int64_t size = static_cast<int64_t>(v.size());
    return b.Constant("f" + std::to_string(n++), Tensor::FromFloat(v, {size}));
  };
  auto sizes = [&](std::vector<int64_t> v) {
    const int64_t size = static_cast<int64_t>(v.size());
    return b.Constant("s" + std::to_string(n++), Tensor::FromInt64(v, {size}));
  };
  using A = std::map<std::string, Attribute>;
  auto s = [](const char* v) { return Attribute::String(v); };
  Value* none = nullptr;
  b.Output(b.Op("Resize", {x, none, floats({1, 1, 2, 1.5f})},
                A{{"mode", s("nearest")},
                  {"coordinate_transformation_mode", s("asymmetric")},
                  {"nearest_mode", s("floor")}}));
  b.Output(b.Op("Resize", {x, none, none, sizes({1, 2, 9, 4})}, A{{"mode", s("linear")}}));
  b.Output(b.Op("Resize", {x, none, floats({1, 1, 0.6f, 0.5f})},
                A{{"mode", s("linear")}, {"antialias", Attribute::Int(1)}}));
  b.Output(b.Op("Resize", {x, none, none, sizes({1, 2, 7, 8})},
                A{{"mode", s("cubic")}, {"coordinate_transformation_mode", s("align_corners")}}));
  b.Output(b.Op("Resize",
                {x, floats({0, 0, 0.2f, 0.1f, 1, 1, 1.3f, 0.9f}), none, sizes({1, 2, 4, 4})},
                A{{"mode", s("linear")},
                  {"coordinate_transformation_mode", s("tf_crop_and_resize")},
                  {"extrapolation_value", Attribute::Float(-3.f)}}));
  b.Output(b.Op("Resize", {ids, none, floats({2, 0.5f, 1.5f})}, A{{"mode", s("nearest")}}));
  Outcome o = ExpectMatchesReference(b.Build(), /*max_fallbacks=*/0);
  ASSERT_TRUE(o.engine);
  EXPECT_EQ(o.engine->info().fallback_ops, 0);
}

// Linear interpolation of integers (rounded and saturated by the reference's rules) stays on
// the reference kernel; nearest on the same integers does not.
TEST(CpuEngineOwnKernels, ResizeTheKernelLeavesToTheReference) {
  GraphBuilder b;
  Value* ids = b.Input("ids", DType::kInt32, {1, 1, 4, 4});
  Value* none = nullptr;
  Value* sizes = b.Constant("sizes", Tensor::FromInt64({1, 1, 6, 6}, {4}));
  b.Output(b.Op("Resize", {ids, none, none, sizes}, {{"mode", Attribute::String("linear")}}));
  b.Output(b.Op("Resize", {ids, none, none, sizes}, {{"mode", Attribute::String("nearest")}}));
  Outcome o = ExpectMatchesReference(b.Build(), /*max_fallbacks=*/1);
  ASSERT_TRUE(o.engine);
  EXPECT_EQ(o.engine->info().fallback_ops, 1);
}

// RNN, GRU and LSTM with constant weights run the own recurrent kernel: directions, layouts,
// sequence lengths, initial states, clip, peepholes, input_forget, linear_before_reset and
// activations with alpha/beta, against the reference.
TEST(CpuEngineOwnKernels, RecurrentCellsEveryForm) {
  GraphBuilder b;
  const int64_t T = 10, B = 3, I = 4, H = 6;  // lengths are drawn from [0, 10]
  Value* x = b.Input("x", DType::kFloat32, {T, B, I});
  Value* xb = b.Input("xb", DType::kFloat32, {B, T, I});  // batch first
  Value* lens = b.Input("lens", DType::kInt32, {B});
  Value* h0 = b.Input("h0", DType::kFloat32, {2, B, H});
  Value* c0 = b.Input("c0", DType::kFloat32, {2, B, H});
  int n = 0;
  auto w = [&](std::vector<int64_t> shape) {
    ++n;
    return b.Constant("w" + std::to_string(n), Random(shape, 100 + n, 0.5f));
  };
  using A = std::map<std::string, Attribute>;
  auto str = [](const char* v) { return Attribute::String(v); };
  Value* none = nullptr;
  // LSTM: bidirectional, lengths, initial states, peepholes, clip.
  for (Value* o :
       b.OpN("LSTM",
             {x, w({2, 4 * H, I}), w({2, 4 * H, H}), w({2, 8 * H}), lens, h0, c0, w({2, 3 * H})}, 3,
             A{{"hidden_size", Attribute::Int(H)},
               {"direction", str("bidirectional")},
               {"clip", Attribute::Float(2.5f)}})) {
    b.Output(o);
  }
  // LSTM, batch first, input_forget, reverse, only Y_h.
  b.Output(b.OpN("LSTM", {xb, w({1, 4 * H, I}), w({1, 4 * H, H})}, 2,
                 A{{"hidden_size", Attribute::Int(H)},
                   {"layout", Attribute::Int(1)},
                   {"direction", str("reverse")},
                   {"input_forget", Attribute::Int(1)}})[1]);
  // GRU both ways of the reset gate.
  for (int64_t lbr : {0, 1}) {
    for (Value* o : b.OpN(
             "GRU", {x, w({1, 3 * H, I}), w({1, 3 * H, H}), w({1, 6 * H}), lens}, 2,
             A{{"hidden_size", Attribute::Int(H)}, {"linear_before_reset", Attribute::Int(lbr)}})) {
      b.Output(o);
    }
  }
  // RNN with a parameterized activation per direction.
  b.Output(b.OpN("RNN", {x, w({2, H, I}), w({2, H, H}), none, none, h0}, 2,
                 A{{"hidden_size", Attribute::Int(H)},
                   {"direction", str("bidirectional")},
                   {"activations", Attribute::Strings({"LeakyRelu", "ScaledTanh"})},
                   {"activation_alpha", Attribute::Floats({0.2f, 0.9f})},
                   {"activation_beta", Attribute::Floats({0.f, 1.1f})}})[0]);
  Outcome o = ExpectMatchesReference(b.Build(), /*max_fallbacks=*/0);
  ASSERT_TRUE(o.engine);
  EXPECT_EQ(o.engine->info().fallback_ops, 0);
}

// Weights computed at run time (not constants) leave the cell to the reference.
TEST(CpuEngineOwnKernels, RecurrentWithRuntimeWeightsFallsBack) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {3, 2, 4});
  Value* wr = b.Input("w", DType::kFloat32, {1, 5, 4});
  Value* r = b.Constant("r", Random({1, 5, 5}, 7, 0.5f));
  b.Output(b.OpN("RNN", {x, wr, r}, 2, {{"hidden_size", Attribute::Int(5)}})[0]);
  Outcome o = ExpectMatchesReference(b.Build(), /*max_fallbacks=*/1);
  ASSERT_TRUE(o.engine);
  EXPECT_EQ(o.engine->info().fallback_ops, 1);
}

TEST(CpuEngineOwnKernels, ReductionsTheKernelLeavesToTheReference) {
  // LogSumExp (wants a max pass) and integer inputs.
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {3, 4});
  Value* ids = b.Input("ids", DType::kInt64, {3, 4});
  Value* axes = b.Constant("a", Tensor::FromInt64({1}, {1}));
  b.Output(b.Op("ReduceLogSumExp", {x, axes}));
  b.Output(b.Op("ReduceSum", {ids, axes}));
  auto g = b.Build();
  CompiledGraph keep = std::move(*CompileGraph(*g, {}));
  auto engine = cpu::BuildCpuEngine(keep, {});
  ASSERT_TRUE(engine.ok()) << engine.status();
  EXPECT_EQ((*engine)->info().fallback_ops, 2);
}

TEST(CpuEngineOwnKernels, GatherIndexOutOfRangeIsAnError) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {4, 2});
  Value* ids = b.Input("ids", DType::kInt64, {1});
  b.Output(b.Op("Gather", {x, ids}));
  auto g = b.Build();
  CompiledGraph keep = std::move(*CompileGraph(*g, {}));
  auto engine = std::move(*cpu::BuildCpuEngine(keep, {}));
  std::vector<Tensor> outs;
  EXPECT_TRUE(
      absl::IsInvalidArgument(engine->Run({Random({4, 2}, 1), Tensor::FromInt64({7}, {1})}, outs)));
  EXPECT_TRUE(engine->Run({Random({4, 2}, 1), Tensor::FromInt64({-1}, {1})}, outs).ok());
}

// ShuffleNet v2's block end at O2: Concat of the block's two halves, the channel shuffle and
// the next block's halves become Gathers along the channels (fold_channel_shuffle), each above
// the parallel threshold ([8, 116, 28, 28]: 2.9 MB), read by convolutions in their layouts.
TEST(CpuEngineOwnKernels, ChannelShuffleGathersSplitAcrossThreads) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {8, 116, 28, 28});
  Value* y = b.Input("y", DType::kFloat32, {8, 116, 28, 28});
  Value* cat = b.Op("Concat", {x, y}, {{"axis", Attribute::Int(1)}});
  auto ints = [&](std::vector<int64_t> v) {
    return b.Constant("i", Tensor::FromInt64(v, {static_cast<int64_t>(v.size())}));
  };
  Value* r = b.Op("Reshape", {cat, ints({8, 2, 116, 28, 28})});
  Value* t = b.Op("Transpose", {r}, {{"perm", Attribute::Ints({0, 2, 1, 3, 4})}});
  Value* s = b.Op("Reshape", {t, ints({8, 232, 28, 28})});
  Value* lo = b.Op("Slice", {s, ints({0}), ints({116}), ints({1})});
  Value* hi = b.Op("Slice", {s, ints({116}), ints({232}), ints({1})});
  b.Output(lo);
  b.Output(b.Op("Conv", {hi, b.Constant("w", Random({16, 116, 1, 1}, 40))}));
  Outcome o = ExpectMatchesReference(b.Build(), /*max_fallbacks=*/0, OptLevel::kO2);
  ASSERT_TRUE(o.engine);
  EXPECT_EQ(o.compiled.report.op_types_after.count("Transpose"), 0u);
  EXPECT_EQ(o.compiled.report.op_types_after.count("Slice"), 0u);
  EXPECT_GE(o.compiled.report.op_types_after.count("Gather"), 1u);
}

}  // namespace
}  // namespace kiln
