// Dynamic dims at serve time: the LRU and shape key, the request's dim values, ShapeEngines
// with a fake build (one build per shape and bucket however many requests wait, eviction,
// refused shapes not rebuilt), and BuildModel/BuildShapeEngine on a real graph.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "ir/builder.h"
#include "ops/interpreter.h"
#include "server/model/model_builder.h"
#include "server/serving/request_validation.h"
#include "server/serving/shape_engines.h"

namespace kiln::server {
namespace {

TEST(LruMap, KeepsTheMostRecentlyUsedAndEvictsTheOldest) {
  LruMap<int> lru(2);
  EXPECT_TRUE(lru.Insert("a", 1).empty());
  EXPECT_TRUE(lru.Insert("b", 2).empty());
  ASSERT_NE(lru.Find("a"), nullptr);  // "a" is now the most recent: "b" goes next
  const std::vector<int> out = lru.Insert("c", 3);
  EXPECT_EQ(out, std::vector<int>{2});
  EXPECT_EQ(lru.Find("b"), nullptr);  // negative: an evicted key is gone
  EXPECT_EQ(lru.Find("zz"), nullptr);
  ASSERT_NE(lru.Find("a"), nullptr);
  EXPECT_EQ(*lru.Find("c"), 3);
  EXPECT_EQ(lru.size(), 2u);
  EXPECT_EQ(lru.entries().front().first, "c");
}

TEST(ShapeKey, NamesEverySymbolInOrder) {
  EXPECT_EQ(ShapeKey({{"sequence", 17}, {"height", 3}}), "height=3,sequence=17");
  EXPECT_EQ(ShapeKey({}), "");
}

ModelSignature TextSignature() {
  ModelSignature sig;
  sig.inputs = {{"ids", DType::kInt64, {-1, -1}}, {"mask", DType::kInt64, {-1, -1}}};
  sig.dim_symbols = {{"", "sequence"}, {"", "sequence"}};
  sig.default_dims = {{"sequence", 16}};
  sig.max_batch_size = 4;
  return sig;
}

TEST(DynamicDimValues, ReadsTheSizesAndRefusesInputsThatDisagree) {
  const ModelSignature sig = TextSignature();
  auto v = DynamicDimValues(sig, {Tensor(DType::kInt64, {2, 17}), Tensor(DType::kInt64, {2, 17})});
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, (DimValues{{"sequence", 17}}));
  auto bad =
      DynamicDimValues(sig, {Tensor(DType::kInt64, {2, 17}), Tensor(DType::kInt64, {2, 18})});
  ASSERT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("('sequence') is 18, but input 'ids' has 17"),
            std::string::npos)
      << bad.status();
  ModelSignature fixed;  // a static model has no dynamic dims
  fixed.inputs = {{"x", DType::kFloat32, {-1, 4}}};
  EXPECT_TRUE(DynamicDimValues(fixed, {Tensor(DType::kFloat32, {1, 4})})->empty());
}

// Answers [rows, 1] filled with the shape's `sequence`.
class FakeEngine : public runtime::Engine {
 public:
  explicit FakeEngine(int64_t seq) : seq_(seq) {}
  const runtime::EngineInfo& info() const override { return info_; }
  const std::vector<runtime::TensorSpec>& inputs() const override { return specs_; }
  const std::vector<runtime::TensorSpec>& outputs() const override { return specs_; }
  absl::Status Run(const std::vector<Tensor>& in, std::vector<Tensor>& out) override {
    out.assign(1, Tensor(DType::kFloat32, {in[0].dim(0), 1}));
    for (int64_t r = 0; r < in[0].dim(0); ++r) {
      out[0].mutable_data<float>()[r] = static_cast<float>(seq_);
    }
    return absl::OkStatus();
  }

 private:
  int64_t seq_;
  runtime::EngineInfo info_;
  std::vector<runtime::TensorSpec> specs_;
};

struct FakeBuilds {
  std::atomic<int> count{0}, checked{0};
  int instances = 1;
  ShapeBuildFn Fn() {
    return [this](const DimValues& dims, int64_t, bool check) -> absl::StatusOr<ShapeEngineList> {
      ++count;
      if (check) ++checked;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // requests pile up meanwhile
      const int64_t seq = dims.at("sequence");
      if (seq > 512) return absl::InvalidArgumentError("longer than the positions");
      ShapeEngineList list;
      for (int i = 0; i < instances; ++i) list.push_back(std::make_unique<FakeEngine>(seq));
      return list;
    };
  }
};

BatchPolicy OneBucket() {
  BatchPolicy p;
  p.buckets = {1};
  p.model = "shape_test";
  return p;
}

absl::StatusOr<float> Ask(ShapeEngines& shapes, int64_t seq) {
  ASSIGN_OR_RETURN(auto f, shapes.Enqueue({{"sequence", seq}}, {Tensor(DType::kInt64, {1, seq})}, 1,
                                          std::nullopt));
  ASSIGN_OR_RETURN(std::vector<Tensor> out, f.get());
  return out.at(0).data<float>()[0];
}

// `n` threads ask for shape `seq` at once; how many got its answer.
int AskAtOnce(ShapeEngines& shapes, int n, int64_t seq) {
  std::vector<std::thread> threads;
  std::atomic<int> right{0};
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&] {
      auto v = Ask(shapes, seq);
      if (v.ok() && *v == static_cast<float>(seq)) ++right;
    });
  }
  for (auto& t : threads) t.join();
  return right.load();
}

TEST(ShapeEngines, ConcurrentRequestsForOneShapeShareOneBuild) {
  FakeBuilds builds;
  auto shapes = ShapeEngines::Create(OneBucket(), 4, builds.Fn());
  ASSERT_TRUE(shapes.ok()) << shapes.status();
  EXPECT_EQ(AskAtOnce(**shapes, 8, 17), 8);
  EXPECT_EQ(builds.count.load(), 1);
  const ShapeCounters c = (*shapes)->counters();
  EXPECT_EQ(c.hits + c.misses, 8);
  EXPECT_EQ(c.misses, 1);
  EXPECT_EQ(c.builds, 1);
}

// Counts the batches running at once on engines that share `Overlap`.
struct Overlap {
  std::atomic<int> now{0}, most{0};
};

class SlowEngine : public FakeEngine {
 public:
  SlowEngine(int64_t seq, Overlap& overlap) : FakeEngine(seq), overlap_(overlap) {}
  absl::Status Run(const std::vector<Tensor>& in, std::vector<Tensor>& out) override {
    const int at = ++overlap_.now;
    int most = overlap_.most.load();
    while (at > most && !overlap_.most.compare_exchange_weak(most, at)) {
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    --overlap_.now;
    return FakeEngine::Run(in, out);
  }

 private:
  Overlap& overlap_;
};

// Four requests of one shape from four threads; the most batches that ran at once.
int MostAtOnce(int instances, int built) {
  Overlap overlap;
  std::atomic<int> builds{0};
  ShapeBuildFn fn = [&](const DimValues& dims, int64_t, bool) -> absl::StatusOr<ShapeEngineList> {
    ++builds;
    ShapeEngineList list;
    for (int i = 0; i < built; ++i) {
      list.push_back(std::make_unique<SlowEngine>(dims.at("sequence"), overlap));
    }
    return list;
  };
  auto shapes = ShapeEngines::Create(OneBucket(), 4, fn, instances);
  EXPECT_TRUE(shapes.ok()) << shapes.status();
  const int right = AskAtOnce(**shapes, 4, 17);
  EXPECT_EQ(builds.load(), 1);  // the instances come from one build
  return right == 4 ? overlap.most.load() : -right;
}

TEST(ShapeEngines, InstancesRunBatchesOfOneShapeAtOnce) {
  EXPECT_EQ(MostAtOnce(/*instances=*/2, /*built=*/2), 2);
  EXPECT_EQ(MostAtOnce(1, 1), 1);  // negative: one instance runs one batch at a time
  // A build that makes fewer engines than the instances fails every request of the shape.
  EXPECT_EQ(MostAtOnce(2, 1), 0);
  FakeBuilds never;
  EXPECT_FALSE(ShapeEngines::Create(OneBucket(), 4, never.Fn(), /*instances=*/0).ok());
}

TEST(ShapeEngines, EvictsTheLeastRecentlyUsedShapeBeyondTheCapacity) {
  FakeBuilds builds;
  auto shapes = ShapeEngines::Create(OneBucket(), 2, builds.Fn());
  ASSERT_TRUE(shapes.ok());
  for (int64_t seq : {17, 93, 17, 40, 93}) EXPECT_EQ(*Ask(**shapes, seq), seq);
  // 17 (miss), 93 (miss), 17 (hit), 40 (miss, evicts 93), 93 (miss again, evicts 17).
  const ShapeCounters c = (*shapes)->counters();
  EXPECT_EQ(c.misses, 4);
  EXPECT_EQ(c.hits, 1);
  EXPECT_EQ(c.evictions, 2);
  EXPECT_EQ(builds.count.load(), 4);
  const std::vector<ShapeSummary> kept = (*shapes)->Shapes();
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(kept[0].dims, "sequence=93");
  EXPECT_EQ(kept[1].dims, "sequence=40");
  EXPECT_EQ(kept[0].batches, std::vector<int64_t>{1});
}

TEST(ShapeEngines, APrebuiltShapeServesWithoutABuildAndIsCountedApart) {
  FakeBuilds builds;
  auto shapes = ShapeEngines::Create(OneBucket(), 4, builds.Fn());
  ASSERT_TRUE(shapes.ok());
  ASSERT_TRUE((*shapes)->Prebuild({{"sequence", 32}}, 1, /*check=*/true).ok());
  EXPECT_EQ((*shapes)->Prebuild({{"sequence", 600}}, 1, false).code(),
            absl::StatusCode::kInvalidArgument);  // a class that cannot build fails the load
  EXPECT_EQ(builds.count.load(), 2);
  EXPECT_EQ(builds.checked.load(), 1);
  EXPECT_EQ(*Ask(**shapes, 32), 32.0f);
  const ShapeCounters c = (*shapes)->counters();
  EXPECT_EQ(c.prebuilt, 2);
  EXPECT_EQ(c.builds, 0);
  EXPECT_EQ(c.hits, 1);
  EXPECT_EQ(c.misses, 0);
  EXPECT_EQ(builds.count.load(), 2);  // the request built nothing
}

TEST(ShapeEngines, ARefusedShapeIsNotRebuiltAndOthersStillServe) {
  FakeBuilds builds;
  auto shapes = ShapeEngines::Create(OneBucket(), 4, builds.Fn());
  ASSERT_TRUE(shapes.ok());
  for (int i = 0; i < 3; ++i) {
    auto v = Ask(**shapes, 600);
    ASSERT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(v.status().message().find("shape sequence=600, batch 1"), std::string::npos)
        << v.status();
  }
  EXPECT_EQ(builds.count.load(), 1);
  EXPECT_EQ(*Ask(**shapes, 5), 5.0f);
  (*shapes)->Stop();
  EXPECT_EQ(Ask(**shapes, 5).status().code(), absl::StatusCode::kUnavailable);
}

// x[batch, sequence] -> Softmax over the sequence -> y[batch, sequence]: different sizes
// give different answers, and the reference says which.
std::unique_ptr<Graph> SoftmaxModel() {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {Dim::Symbol("batch"), Dim::Symbol("sequence")});
  b.Output(b.Op("Softmax", {x}, {{"axis", Attribute::Int(-1)}}));
  return b.Build();
}

ModelConfig DynamicConfig() {
  ModelConfig c;
  c.max_batch_size = 2;
  c.device = "cpu";
  c.dynamic_dims = {{"sequence", 8}};
  EXPECT_TRUE(FinalizeModelConfig(c).ok());
  return c;
}

TEST(BuildModel, DynamicDimsBuildAtTheWarmupSizeAndMarkTheSignature) {
  auto model = SoftmaxModel();
  auto built = BuildModel(*model, DynamicConfig(), nullptr);
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_EQ(built->signature.inputs[0].shape, (std::vector<int64_t>{-1, -1}));
  EXPECT_EQ(built->signature.outputs[0].shape, (std::vector<int64_t>{-1, -1}));
  EXPECT_EQ(built->signature.default_dims, (DimValues{{"sequence", 8}}));
  EXPECT_EQ(built->engines.at(1)[0]->inputs()[0].shape, (std::vector<int64_t>{1, 8}));
  // Another size: its own engine, checked, answering what the reference answers.
  auto engine = BuildShapeEngine(*model, DynamicConfig(), *built, {{"sequence", 13}}, 2);
  ASSERT_TRUE(engine.ok()) << engine.status();
  Tensor x(DType::kFloat32, {2, 13});
  for (int64_t i = 0; i < x.numel(); ++i) x.mutable_data<float>()[i] = 0.1f * (i % 7);
  std::vector<Tensor> out;
  ASSERT_TRUE((*engine)->Run({x}, out).ok());
  auto bound = model->Clone();
  auto want = ref::Run(*bound, {{"x", x}});
  ASSERT_TRUE(want.ok()) << want.status();
  const Tensor& w = want->begin()->second;
  ASSERT_EQ(out[0].shape(), w.shape());
  for (int64_t i = 0; i < w.numel(); ++i) {
    EXPECT_NEAR(out[0].data<float>()[i], w.data<float>()[i], 1e-5) << i;
  }
}

TEST(BuildModel, DynamicDimsNamingNoOpenDimAreRefused) {
  auto model = SoftmaxModel();
  ModelConfig c = DynamicConfig();
  c.dynamic_dims = {{"sequense", 8}};  // a typo
  EXPECT_EQ(BuildModel(*model, c, nullptr).status().code(), absl::StatusCode::kInvalidArgument);
  c.dynamic_dims = {{"batch", 8}};  // the batch varies already
  EXPECT_EQ(BuildModel(*model, c, nullptr).status().code(), absl::StatusCode::kInvalidArgument);
  c.dynamic_dims = {{"sequence", 8}};  // fixed by input_shapes: not open any more
  c.input_shapes = {{"x", {-1, 8}}};
  EXPECT_EQ(BuildModel(*model, c, nullptr).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ModelConfig, ReadsDynamicDimsAndTheLruBound) {
  auto c =
      ParseModelConfig("dynamic_dims: {sequence: 64}\nmax_shape_engines: 2\n", ModelConfig(), "m");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->dynamic_dims, (DimValues{{"sequence", 64}}));
  EXPECT_EQ(c->max_shape_engines, 2);
  EXPECT_FALSE(ParseModelConfig("dynamic_dims: {sequence: 0}\n", ModelConfig(), "m").ok());
  EXPECT_FALSE(ParseModelConfig("max_shape_engines: 0\n", ModelConfig(), "m").ok());
  EXPECT_FALSE(ParseModelConfig("dynamic_dims: [1]\n", ModelConfig(), "m").ok());
  EXPECT_EQ(ModelConfig().shape_classes, "auto");
  auto off = ParseModelConfig("shape_classes: off\n", ModelConfig(), "m");
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_EQ(off->shape_classes, "off");
  auto bad = ParseModelConfig("shape_classes: always\n", ModelConfig(), "m");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("shape_classes"), std::string::npos) << bad.status();
}

}  // namespace
}  // namespace kiln::server
