// Memory planner tests: property tests of the graph-free buffer assignment on seeded random
// lifetimes, and graph tests of views / in-place reuse / unplanned values. The arena against
// the liveness lower bound on model-like schedules is measured in memory_plan_measure_test.cc.
#include "compiler/plan/memory_plan.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <random>

#include "compiler/plan/buffer_assign.h"
#include "compiler/shape/infer.h"
#include "ir/builder.h"

namespace kiln::plan {
namespace {

// ---------------------------------------------------------------- buffer assignment

// An independent, brute-force statement of the safety properties (ValidatePlan is also
// checked, but it shares code with the planner).
void ExpectSafe(const std::vector<BufferRequest>& req, const BufferAssignment& a,
                int64_t alignment) {
  ASSERT_EQ(a.offsets.size(), req.size());
  int64_t naive = 0;
  for (size_t i = 0; i < req.size(); ++i) {
    const int64_t si = AlignUp(req[i].size_bytes, alignment);
    naive += si;
    EXPECT_EQ(a.offsets[i] % alignment, 0) << "buffer " << i;
    EXPECT_GE(a.offsets[i], 0);
    EXPECT_LE(a.offsets[i] + si, a.arena_bytes);
    for (size_t j = 0; j < i; ++j) {
      const int64_t sj = AlignUp(req[j].size_bytes, alignment);
      const bool live_together =
          req[i].first_step <= req[j].last_step && req[j].first_step <= req[i].last_step;
      const bool share_bytes = a.offsets[i] < a.offsets[j] + sj && a.offsets[j] < a.offsets[i] + si;
      EXPECT_FALSE(live_together && share_bytes && si > 0 && sj > 0)
          << "buffers " << j << " and " << i;
    }
  }
  EXPECT_EQ(a.naive_bytes, naive);
  EXPECT_GE(a.arena_bytes, a.lower_bound_bytes);
  EXPECT_LE(a.arena_bytes, a.naive_bytes);
  EXPECT_TRUE(ValidatePlan(a, req).ok()) << ValidatePlan(a, req);
}

// Random lifetimes: mostly short (activations), some long (skip connections), sizes spread
// over orders of magnitude, a few empty tensors.
std::vector<BufferRequest> RandomRequests(std::mt19937& rng) {
  std::uniform_int_distribution<int> count(0, 60), steps(1, 50), coin(0, 9);
  const int n = count(rng), horizon = steps(rng);
  std::vector<BufferRequest> req;
  for (int i = 0; i < n; ++i) {
    BufferRequest r;
    r.first_step = std::uniform_int_distribution<int>(0, horizon - 1)(rng);
    const int span = coin(rng) < 8 ? std::uniform_int_distribution<int>(0, 3)(rng)
                                   : std::uniform_int_distribution<int>(0, horizon)(rng);
    r.last_step = r.first_step + span;
    r.size_bytes = coin(rng) == 0
                       ? 0
                       : std::uniform_int_distribution<int64_t>(1, 1 << (1 + coin(rng) * 2))(rng);
    req.push_back(r);
  }
  return req;
}

TEST(BufferAssign, RandomLifetimesArePackedSafely) {
  double worst = 1.0, sum = 0.0;
  int counted = 0;
  for (uint32_t seed = 0; seed < 3000; ++seed) {
    std::mt19937 rng(seed);
    const std::vector<BufferRequest> req = RandomRequests(rng);
    const int64_t alignment = std::vector<int64_t>{1, 8, 64, 256}[seed % 4];
    AssignOptions opt;
    opt.alignment = alignment;
    opt.search_orderings = seed % 5 != 0;  // the plain greedy must be safe too
    absl::StatusOr<BufferAssignment> a = AssignBuffers(req, opt);
    ASSERT_TRUE(a.ok()) << a.status();
    SCOPED_TRACE(testing::Message() << "seed " << seed);
    ExpectSafe(req, *a, alignment);
    if (HasFailure()) return;
    if (a->lower_bound_bytes > 0) {
      const double r = static_cast<double>(a->arena_bytes) / a->lower_bound_bytes;
      worst = std::max(worst, r);
      sum += r;
      ++counted;
    }
  }
  std::printf("random lifetimes: mean arena/bound %.3f, worst %.3f over %d cases\n", sum / counted,
              worst, counted);
}

TEST(BufferAssign, SearchNeverLosesToPlainGreedy) {
  for (uint32_t seed = 0; seed < 500; ++seed) {
    std::mt19937 rng(seed + 100000);
    const std::vector<BufferRequest> req = RandomRequests(rng);
    AssignOptions plain;
    plain.search_orderings = false;
    auto a = AssignBuffers(req, plain);
    auto b = AssignBuffers(req);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_LE(b->arena_bytes, a->arena_bytes) << "seed " << seed;
  }
}

TEST(BufferAssign, DisjointLifetimesShareOneSlot) {
  std::vector<BufferRequest> req = {{100, 0, 1}, {64, 2, 3}, {1, 4, 4}};
  auto a = AssignBuffers(req);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->arena_bytes, 128);
  EXPECT_EQ(a->naive_bytes, 128 + 64 + 64);
  EXPECT_EQ(a->lower_bound_bytes, 128);
  for (int64_t off : a->offsets) EXPECT_EQ(off, 0);
}

TEST(BufferAssign, EmptyAndZeroSized) {
  auto empty = AssignBuffers({});
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->arena_bytes, 0);
  auto zeros = AssignBuffers({{0, 0, 5}, {0, 1, 2}});
  ASSERT_TRUE(zeros.ok());
  EXPECT_EQ(zeros->arena_bytes, 0);
  EXPECT_TRUE(ValidatePlan(*zeros, {{0, 0, 5}, {0, 1, 2}}).ok());
}

TEST(BufferAssign, RejectsBadRequests) {
  EXPECT_EQ(AssignBuffers({{-1, 0, 0}}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(AssignBuffers({{8, 3, 2}}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(AssignBuffers({{8, -1, 2}}).status().code(), absl::StatusCode::kInvalidArgument);
  const int64_t huge = int64_t{1} << 62;
  EXPECT_EQ(AssignBuffers({{huge, 0, 0}, {huge, 0, 0}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  AssignOptions bad;
  bad.alignment = 0;
  EXPECT_EQ(AssignBuffers({{8, 0, 0}}, bad).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(BufferAssign, ValidatePlanCatchesOverlapAndMisalignment) {
  const std::vector<BufferRequest> req = {{64, 0, 2}, {64, 1, 3}};
  auto a = AssignBuffers(req);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(ValidatePlan(*a, req).ok());
  BufferAssignment overlap = *a;
  overlap.offsets = {0, 0};
  EXPECT_FALSE(ValidatePlan(overlap, req).ok());
  BufferAssignment misaligned = *a;
  misaligned.offsets[1] += 8;
  misaligned.arena_bytes += 64;
  EXPECT_FALSE(ValidatePlan(misaligned, req).ok());
}

// ---------------------------------------------------------------- graph front end

Tensor ShapeTensor(std::vector<int64_t> dims) {
  const int64_t rank = static_cast<int64_t>(dims.size());
  return Tensor::FromInt64(dims, {rank});
}

absl::StatusOr<MemoryPlan> InferAndPlan(GraphBuilder& b, const PlanOptions& opt = {}) {
  RETURN_IF_ERROR(shape::InferShapes(b.graph()));
  absl::StatusOr<MemoryPlan> plan = PlanMemory(b.graph(), opt);
  if (plan.ok()) {
    EXPECT_TRUE(ValidatePlan(*plan).ok()) << ValidatePlan(*plan) << plan->Describe();
  }
  return plan;
}

TEST(MemoryPlan, ReluChainRunsInPlace) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {1, 64, 8, 8});
  Value* r1 = b.Op("Relu", {x});
  Value* r2 = b.Op("Relu", {r1});
  Value* r3 = b.Op("Relu", {r2});
  Value* r4 = b.Op("Relu", {r3});
  b.Output(r4);
  auto plan = InferAndPlan(b);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->arena_bytes, 64 * 8 * 8 * 4);
  EXPECT_EQ(plan->buffers.size(), 1u);
  EXPECT_EQ(plan->naive_bytes, 3 * 64 * 8 * 8 * 4);
  ASSERT_NE(plan->Find(r2->name), nullptr);
  EXPECT_EQ(plan->Find(r2->name)->alias, AliasKind::kInPlace);
  EXPECT_EQ(plan->Find(r2->name)->alias_of, r1->name);
  EXPECT_EQ(plan->Find(r3->name)->root, r1->name);
  EXPECT_EQ(plan->Find(r1->name)->alias, AliasKind::kNone);  // x is a graph input
  EXPECT_EQ(plan->Find(r4->name), nullptr);                  // graph output
  EXPECT_EQ(plan->Find(x->name), nullptr);                   // graph input
}

TEST(MemoryPlan, WithoutInPlaceAChainPingPongs) {
  GraphBuilder b;
  Value* v = b.Input("x", DType::kFloat32, {256});
  for (int i = 0; i < 6; ++i) v = b.Op("Relu", {v});
  b.Output(v);
  PlanOptions opt;
  opt.in_place = false;
  auto plan = InferAndPlan(b, opt);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->buffers.size(), 5u);
  EXPECT_EQ(plan->arena_bytes, 2 * 1024);
  EXPECT_EQ(plan->lower_bound_bytes, 2 * 1024);
}

TEST(MemoryPlan, ReshapeIsAViewOfItsSource) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {2, 3, 4});
  Value* a = b.Op("Relu", {x});
  Value* r = b.Op("Reshape", {a, b.Constant("shape", ShapeTensor({6, 4}))});
  Value* s = b.Op("Softmax", {r});  // not element-wise: needs its own buffer
  Value* t = b.Op("Transpose", {s});
  b.Output(t);
  auto plan = InferAndPlan(b);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const ValuePlan* pa = plan->Find(a->name);
  const ValuePlan* pr = plan->Find(r->name);
  const ValuePlan* ps = plan->Find(s->name);
  ASSERT_TRUE(pa && pr && ps);
  EXPECT_EQ(pr->alias, AliasKind::kView);
  EXPECT_EQ(pr->alias_of, a->name);
  EXPECT_EQ(pr->offset, pa->offset);
  EXPECT_EQ(pr->buffer, pa->buffer);
  // The source's buffer lives until the view's last use (Softmax, step 2).
  EXPECT_EQ(plan->buffers[pa->buffer].last_step, 2);
  EXPECT_NE(ps->buffer, pa->buffer);
  EXPECT_EQ(plan->buffers.size(), 2u);
}

TEST(MemoryPlan, ViewsOfExternalMemoryAreNotPlanned) {
  GraphBuilder b;
  // The constant is above shape inference's folding limit, so its Unsqueeze stays a node.
  Value* x = b.Input("x", DType::kFloat32, {64, 80});
  Value* c = b.Constant("c", Tensor::FromFloat(std::vector<float>(5120, 1.0f), {5120}));
  Value* vx = b.Op("Flatten", {x});
  Value* vvx = b.Op("Identity", {vx});  // a view of a view of the input
  Value* vc = b.Op("Unsqueeze", {c, b.Constant("axes", ShapeTensor({0}))});
  Value* out1 = b.Op("Relu", {vvx});
  Value* vo = b.Op("Reshape", {out1, b.Constant("shape", ShapeTensor({5120}))});
  Value* sum = b.Op("Add", {vo, vc});
  b.Output(out1);
  b.Output(sum);
  auto plan = InferAndPlan(b);
  ASSERT_TRUE(plan.ok()) << plan.status();
  for (Value* v : {vx, vvx, vc, vo}) {
    const ValuePlan* p = plan->Find(v->name);
    ASSERT_NE(p, nullptr) << v->name;
    EXPECT_TRUE(p->external) << v->name;
    EXPECT_EQ(p->offset, -1);
    EXPECT_EQ(p->alias, AliasKind::kView);
  }
  EXPECT_EQ(plan->Find(vvx->name)->root, x->name);
  EXPECT_EQ(plan->Find(vvx->name)->alias_of, vx->name);
  EXPECT_EQ(plan->Find(vc->name)->root, c->name);
  EXPECT_EQ(plan->Find(vo->name)->root, out1->name);
  for (Value* v : {x, c, out1, sum}) EXPECT_EQ(plan->Find(v->name), nullptr) << v->name;
  EXPECT_EQ(plan->arena_bytes, 0);
  EXPECT_EQ(plan->buffers.size(), 0u);
}

TEST(MemoryPlan, DoesNotReuseInPlaceWhenInputHasLaterConsumer) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {4, 16});
  Value* a = b.Op("Relu", {x});
  Value* s = b.Op("Sigmoid", {a});  // `a` is read again by the Add: must not be overwritten
  Value* y = b.Op("Add", {s, a});
  b.Output(y);
  auto plan = InferAndPlan(b);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const ValuePlan* pa = plan->Find(a->name);
  const ValuePlan* ps = plan->Find(s->name);
  ASSERT_TRUE(pa && ps);
  EXPECT_EQ(ps->alias, AliasKind::kNone);
  EXPECT_NE(ps->offset, pa->offset);
  EXPECT_EQ(plan->arena_bytes, 2 * 256);
}

TEST(MemoryPlan, DoesNotReuseInPlaceWhenAViewOfTheInputLivesOn) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {4, 16});
  Value* a = b.Op("Relu", {x});
  Value* v = b.Op("Reshape", {a, b.Constant("shape", ShapeTensor({64}))});
  Value* s = b.Op("Sigmoid", {a});  // `a` itself dies here, but its view is read later
  Value* s2 = b.Op("Reshape", {s, b.Constant("shape2", ShapeTensor({64}))});
  Value* y = b.Op("Add", {s2, v});
  b.Output(y);
  auto plan = InferAndPlan(b);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->Find(s->name)->alias, AliasKind::kNone);
  EXPECT_NE(plan->Find(s->name)->offset, plan->Find(a->name)->offset);
}

TEST(MemoryPlan, InPlaceNeedsTheOutputsSizeAndDtype) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {1, 16});
  Value* z = b.Input("z", DType::kFloat32, {4, 16});
  Value* small = b.Op("Relu", {x});
  Value* big = b.Op("Add", {small, z});  // broadcasts: `small` is too small to hold the sum
  Value* cmp = b.Op("Less", {big, z});   // bool output: not element-wise in-place material
  Value* w = b.Op("Where", {cmp, big, z});
  b.Output(w);
  auto plan = InferAndPlan(b);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->Find(big->name)->alias, AliasKind::kNone);
  EXPECT_EQ(plan->Find(cmp->name)->alias, AliasKind::kNone);
}

TEST(MemoryPlan, AddReusesADyingResidualInput) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {8, 8});
  Value* a = b.Op("Relu", {x});
  Value* t = b.Op("Transpose", {a});
  Value* sum = b.Op("Add", {t, a});  // both inputs die here; the first one is reused
  Value* out = b.Op("Softmax", {sum});
  b.Output(out);
  auto plan = InferAndPlan(b);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->Find(sum->name)->alias, AliasKind::kInPlace);
  EXPECT_EQ(plan->Find(sum->name)->alias_of, t->name);
  EXPECT_EQ(plan->arena_bytes, 2 * 256);
}

TEST(MemoryPlan, KilnViewAttributeMakesAView) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {32});
  Value* a = b.Op("Relu", {x});
  Value* v = b.Op("Reinterpret", {a}, {{"kiln_view", Attribute::Int(1)}}, kKilnDomain);
  b.Output(b.Op("Softmax", {a}));
  b.Output(b.Op("Neg", {v}));
  // Shapes by hand: Reinterpret has no shape rule.
  for (Value* t : {a, v}) {
    t->dtype = t == v ? DType::kInt32 : DType::kFloat32;
    t->shape = Shape{32};
  }
  absl::StatusOr<MemoryPlan> plan = PlanMemory(b.graph());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(ValidatePlan(*plan).ok());
  EXPECT_EQ(plan->Find(v->name)->alias, AliasKind::kView);
  EXPECT_EQ(plan->Find(v->name)->offset, plan->Find(a->name)->offset);
}

TEST(MemoryPlan, UnknownShapeIsInvalidArgument) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {Dim::Symbol("batch"), 16});
  Value* a = b.Op("Relu", {x});
  b.Output(b.Op("Relu", {a}));
  ASSERT_TRUE(shape::InferShapes(b.graph()).ok());
  absl::StatusOr<MemoryPlan> plan = PlanMemory(b.graph());
  ASSERT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(plan.status().message().find(a->name), std::string::npos) << plan.status();
}

TEST(MemoryPlan, UnknownDtypeIsInvalidArgument) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {16});
  Value* m = b.Op("NoSuchOp", {x});  // no shape rule: stays untyped
  b.Output(b.Op("Relu", {m}));
  absl::StatusOr<MemoryPlan> plan = PlanMemory(b.graph());
  ASSERT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(plan.status().message().find(m->name), std::string::npos) << plan.status();
}

TEST(MemoryPlan, DescribeNamesValuesAndTotals) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {4});
  Value* a = b.Op("Relu", {x});
  b.Output(b.Op("Exp", {b.Op("Sigmoid", {a})}));
  auto plan = InferAndPlan(b);
  ASSERT_TRUE(plan.ok());
  const std::string d = plan->Describe();
  EXPECT_NE(d.find("arena 64 bytes"), std::string::npos) << d;
  EXPECT_NE(d.find("in place of " + a->name), std::string::npos) << d;
}

}  // namespace
}  // namespace kiln::plan
