// Memory planner measurements: the arena against the liveness lower bound on ResNet-,
// transformer- and U-Net-like schedules, and the planning time of thousands of buffers.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <random>

#include "compiler/plan/buffer_assign.h"
#include "compiler/plan/memory_plan.h"
#include "ir/builder.h"

namespace kiln::plan {
namespace {

// Shapes are set by hand so the measurement does not depend on shape rules; weights are graph
// inputs (unplanned either way, and nothing gets allocated).
Value* Op(GraphBuilder& b, const std::string& op, std::vector<Value*> in,
          std::vector<int64_t> shape) {
  Value* v = b.Op(op, std::move(in));
  v->dtype = DType::kFloat32;
  v->shape = ToShape(shape);
  return v;
}

Value* Weight(GraphBuilder& b, std::vector<int64_t> shape) {
  static int n = 0;
  return b.Input("w" + std::to_string(n++), DType::kFloat32, ToShape(shape));
}

Value* Conv(GraphBuilder& b, Value* x, int64_t cout, int64_t k, int64_t stride) {
  const std::vector<int64_t> in = StaticDims(*x->shape);
  return Op(b, "Conv", {x, Weight(b, {cout, in[1], k, k})},
            {in[0], cout, in[2] / stride, in[3] / stride});
}

// An op whose output has its first input's shape (activations, residual adds).
Value* Same(GraphBuilder& b, const std::string& op, std::vector<Value*> in) {
  const std::vector<int64_t> shape = StaticDims(*in[0]->shape);
  return Op(b, op, std::move(in), shape);
}

// A bottleneck residual block (BatchNorm folded): 1x1 -> 3x3 -> 1x1, a projection when the
// shape changes, Add, Relu.
Value* Bottleneck(GraphBuilder& b, Value* x, int64_t width, int64_t stride) {
  const int64_t cin = StaticDims(*x->shape)[1];
  Value* h = Same(b, "Relu", {Conv(b, x, width, 1, 1)});
  h = Same(b, "Relu", {Conv(b, h, width, 3, stride)});
  h = Conv(b, h, width * 4, 1, 1);
  Value* skip = (cin != width * 4 || stride != 1) ? Conv(b, x, width * 4, 1, stride) : x;
  return Same(b, "Relu", {Same(b, "Add", {h, skip})});
}

void Report(const char* what, const Graph& g, double* ratio) {
  const auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<MemoryPlan> plan = PlanMemory(g);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_TRUE(ValidatePlan(*plan).ok()) << ValidatePlan(*plan);
  *ratio = static_cast<double>(plan->arena_bytes) / plan->lower_bound_bytes;
  std::printf(
      "%s: %zu nodes, %zu values, %zu buffers; arena %.2f MiB, lower bound %.2f MiB (x%.4f), "
      "naive %.2f MiB; strategy %s; %.1f ms\n",
      what, g.nodes().size(), plan->values.size(), plan->buffers.size(),
      plan->arena_bytes / 1048576.0, plan->lower_bound_bytes / 1048576.0, *ratio,
      plan->naive_bytes / 1048576.0, plan->assignment.strategy.c_str(), ms);
}

TEST(MemoryPlanMeasure, ResNet50LikeScheduleIsNearTheBound) {
  GraphBuilder b;
  Value* x = b.Input("image", DType::kFloat32, {8, 3, 224, 224});
  Value* h = Op(b, "Relu", {Conv(b, x, 64, 7, 2)}, {8, 64, 112, 112});
  h = Op(b, "MaxPool", {h}, {8, 64, 56, 56});
  const int64_t blocks[] = {3, 4, 6, 3};
  for (int stage = 0; stage < 4; ++stage) {
    for (int i = 0; i < blocks[stage]; ++i) {
      h = Bottleneck(b, h, 64 << stage, (stage > 0 && i == 0) ? 2 : 1);
    }
  }
  h = Op(b, "GlobalAveragePool", {h}, {8, 2048, 1, 1});
  h = Op(b, "Flatten", {h}, {8, 2048});
  b.Output(Op(b, "Gemm", {h, Weight(b, {1000, 2048})}, {8, 1000}));
  double ratio = 0;
  Report("resnet50-like b8", b.graph(), &ratio);
  EXPECT_LE(ratio, 1.05);
}

// One pre-norm transformer layer: attention (q/k/v projections, heads split by
// Reshape+Transpose, scaled scores, Softmax, context) and an MLP, each with a residual Add.
Value* TransformerLayer(GraphBuilder& b, Value* x, int64_t B, int64_t S, int64_t D, int64_t H) {
  const int64_t dh = D / H;
  Value* n = Op(b, "LayerNormalization", {x, Weight(b, {D}), Weight(b, {D})}, {B, S, D});
  auto heads = [&]() {
    Value* r =
        Op(b, "Reshape", {Op(b, "MatMul", {n, Weight(b, {D, D})}, {B, S, D})}, {B, S, H, dh});
    return Op(b, "Transpose", {r}, {B, H, S, dh});
  };
  Value* q = heads();
  Value* kt = Op(b, "Transpose", {heads()}, {B, H, dh, S});
  Value* v = heads();
  Value* scores =
      Op(b, "Div", {Op(b, "MatMul", {q, kt}, {B, H, S, S}), Weight(b, {})}, {B, H, S, S});
  Value* probs = Op(b, "Softmax", {scores}, {B, H, S, S});
  Value* ctx = Op(b, "Transpose", {Op(b, "MatMul", {probs, v}, {B, H, S, dh})}, {B, S, H, dh});
  ctx = Op(b, "Reshape", {ctx}, {B, S, D});
  Value* attn = Op(b, "MatMul", {ctx, Weight(b, {D, D})}, {B, S, D});
  x = Op(b, "Add", {x, attn}, {B, S, D});
  n = Op(b, "LayerNormalization", {x, Weight(b, {D}), Weight(b, {D})}, {B, S, D});
  Value* ff =
      Op(b, "Gelu", {Op(b, "MatMul", {n, Weight(b, {D, 4 * D})}, {B, S, 4 * D})}, {B, S, 4 * D});
  ff = Op(b, "MatMul", {ff, Weight(b, {4 * D, D})}, {B, S, D});
  return Op(b, "Add", {x, ff}, {B, S, D});
}

TEST(MemoryPlanMeasure, TransformerLikeScheduleIsNearTheBound) {
  GraphBuilder b;
  const int64_t B = 4, S = 128, D = 768, H = 12;
  Value* h = Op(b, "Relu", {b.Input("tokens", DType::kFloat32, {B, S, D})}, {B, S, D});
  for (int layer = 0; layer < 12; ++layer) h = TransformerLayer(b, h, B, S, D, H);
  b.Output(Op(b, "LayerNormalization", {h, Weight(b, {D}), Weight(b, {D})}, {B, S, D}));
  double ratio = 0;
  Report("bert-base-like b4 s128", b.graph(), &ratio);
  EXPECT_LE(ratio, 1.05);
}

// A U-Net: long-lived encoder skips of shrinking size, consumed in reverse order by the
// decoder, the classic case where a size-only greedy can leave holes.
TEST(MemoryPlanMeasure, UNetLikeScheduleIsNearTheBound) {
  GraphBuilder b;
  Value* h = b.Input("image", DType::kFloat32, {4, 3, 256, 256});
  std::vector<Value*> skips;
  for (int level = 0; level < 4; ++level) {
    h = Same(b, "Relu", {Conv(b, h, 32 << level, 3, 1)});
    h = Same(b, "Relu", {Conv(b, h, 32 << level, 3, 1)});
    skips.push_back(h);
    const std::vector<int64_t> d = StaticDims(*h->shape);
    h = Op(b, "MaxPool", {h}, {d[0], d[1], d[2] / 2, d[3] / 2});
  }
  h = Same(b, "Relu", {Conv(b, h, 512, 3, 1)});
  for (int level = 3; level >= 0; --level) {
    const std::vector<int64_t> s = StaticDims(*skips[level]->shape);
    h = Op(b, "Resize", {h}, {s[0], StaticDims(*h->shape)[1], s[2], s[3]});
    h = Op(b, "Concat", {h, skips[level]}, {s[0], StaticDims(*h->shape)[1] + s[1], s[2], s[3]});
    h = Same(b, "Relu", {Conv(b, h, 32 << level, 3, 1)});
    h = Same(b, "Relu", {Conv(b, h, 32 << level, 3, 1)});
  }
  b.Output(Conv(b, h, 2, 1, 1));
  double ratio = 0;
  Report("unet-like b4 256x256", b.graph(), &ratio);
  EXPECT_LE(ratio, 1.05);
}

// Planning cost on a large request list (not a timed test: the time is printed).
TEST(MemoryPlanMeasure, ThousandsOfBuffers) {
  std::mt19937 rng(7);
  std::vector<BufferRequest> req;
  for (int i = 0; i < 4000; ++i) {
    const int64_t first = i / 2;
    const int64_t span = rng() % 10 == 0 ? rng() % 400 : rng() % 4;
    req.push_back({static_cast<int64_t>(1024 + rng() % (1 << 20)), first, first + span});
  }
  const auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<BufferAssignment> a = AssignBuffers(req);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(ValidatePlan(*a, req).ok());
  std::printf("4000 buffers: arena/bound %.4f, strategy %s, %.1f ms\n",
              static_cast<double>(a->arena_bytes) / a->lower_bound_bytes, a->strategy.c_str(), ms);
}

}  // namespace
}  // namespace kiln::plan
