// BuildModel through the engine cache: a warm build hits every bucket and skips compiling, a
// corrupt file or an entry whose stored answers are wrong is rebuilt, weight blobs are mapped
// once for all buckets and rebuilt when missing, prefetched engines are still re-verified, and
// instances share the tuned layout.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "compiler/onnx/importer.h"
#include "ir/builder.h"
#include "server/model/engine_cache.h"
#include "server/model/engine_factory.h"
#include "server/model/model_builder.h"
#include "tests/unit/engine_cache_util.h"

namespace kiln::server {
namespace {
namespace fs = std::filesystem;

using namespace cache_test;  // NOLINT: the helpers shared with the other half

class BuildThroughCacheTest : public EngineCacheTest {
 protected:
  void SetUp() override {
    EngineCacheTest::SetUp();
    const char* src = std::getenv("KILN_SOURCE_DIR");  // set by ctest
    if (!src) GTEST_SKIP() << "KILN_SOURCE_DIR is not set";
    const fs::path onnx = fs::path(src) / "config/models/example/1/model.onnx";
    graph_ = std::move(*onnx_io::ImportModelFile(onnx.string()));
    config_.max_batch_size = 2;
    ASSERT_TRUE(FinalizeModelConfig(config_).ok());
    hash_ = ContentHash(ReadAll(onnx));
  }
  absl::StatusOr<BuiltModel> Build(EngineCache& cache) {
    return BuildModel(*graph_, config_, nullptr, CacheContext{&cache, hash_});
  }
  std::unique_ptr<Graph> graph_;
  ModelConfig config_;
  std::string hash_;
};

TEST_F(BuildThroughCacheTest, WarmBuildHitsEveryBucket) {
  EngineCache cold(dir_.string());
  auto first = Build(cold);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(cold.stats().misses, 2);  // buckets 1 and 2
  EngineCache warm(dir_.string());
  auto second = Build(warm);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(warm.stats().disk_hits, 2);
  EXPECT_EQ(second->report_json, first->report_json);
  EXPECT_TRUE(second->check.ran);
  EXPECT_EQ(second->engines.size(), 2u);
}

TEST_F(BuildThroughCacheTest, CorruptFileIsRebuilt) {
  EngineCache cold(dir_.string());
  ASSERT_TRUE(Build(cold).ok());
  for (const auto& f : fs::directory_iterator(dir_)) {
    std::string bytes = ReadAll(f.path());
    bytes[bytes.size() / 2] ^= 0x40;
    WriteAll(f.path(), bytes);
  }
  EngineCache warm(dir_.string());
  ASSERT_TRUE(Build(warm).ok());
  EXPECT_EQ(warm.stats().rejected_files, 2);
  EngineCache again(dir_.string());  // the rebuilt entries were written back
  ASSERT_TRUE(Build(again).ok());
  EXPECT_EQ(again.stats().disk_hits, 2);
}

// A well-formed entry whose stored answers disagree with its engine (a stale or tampered
// entry that passes the checksum) fails re-verification and is rebuilt.
TEST_F(BuildThroughCacheTest, EntryThatFailsReverificationIsRebuilt) {
  EngineCache cold(dir_.string());
  auto first = Build(cold);
  ASSERT_TRUE(first.ok()) << first.status();
  StoreWrongAnswers(cold, hash_, config_, {1, 2});
  EngineCache warm(dir_.string());
  auto second = Build(warm);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(warm.stats().disk_hits, 2);  // read, re-verified, found wrong, rebuilt
  EXPECT_TRUE(second->check.ok);
  EngineCache again(dir_.string());
  ASSERT_TRUE(Build(again).ok());
  EXPECT_EQ(again.stats().disk_hits, 2);
  EXPECT_TRUE(second->check.disabled_passes.empty());
}

// A batchable two-layer perceptron with weights large enough for blobs, two buckets.
class BlobBuildTest : public EngineCacheTest {
 protected:
  void SetUp() override {
    EngineCacheTest::SetUp();
    GraphBuilder b;
    Value* x = b.Input("x", DType::kFloat32, {Dim::Symbol("N"), 64});
    Tensor w1 = Weights(64 * 128, 0.01f).Reshaped({64, 128});
    Tensor w2 = Weights(128 * 40, -0.02f).Reshaped({128, 40});
    Value* h = b.Op("Relu", {b.Op("MatMul", {x, b.Constant("w1", w1)})});
    b.Output(b.Op("MatMul", {h, b.Constant("w2", w2)}));
    graph_ = b.Build();
    config_.max_batch_size = 2;
    ASSERT_TRUE(FinalizeModelConfig(config_).ok());
  }
  absl::StatusOr<BuiltModel> Build(EngineCache& cache) {
    return BuildModel(*graph_, config_, nullptr, CacheContext{&cache, ContentHash("mlp")});
  }
  // The engine of batch 2 on a fixed input.
  std::vector<Tensor> Run(BuiltModel& m) {
    Tensor x(DType::kFloat32, {2, 64});
    for (int64_t i = 0; i < x.numel(); ++i) x.mutable_data<float>()[i] = 0.05f * (i % 13) - 0.3f;
    std::vector<Tensor> out;
    EXPECT_TRUE(m.engines.at(2)[0]->Run({x}, out).ok());
    return out;
  }
  std::unique_ptr<Graph> graph_;
  ModelConfig config_;
};

TEST_F(BlobBuildTest, WarmBuildMapsEachBlobOnceForBothBuckets) {
  EngineCache cold(dir_.string());
  auto first = Build(cold);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(cold.stats().misses, 2);
  const size_t blobs = FilesEndingIn(dir_, ".keb").size();
  EXPECT_GE(blobs, 2u);  // w1 and w2 (a pass may fold them into another form, but not away)
  EXPECT_EQ(cold.stats().blobs_written, static_cast<int64_t>(blobs));  // once, not per bucket
  EngineCache warm(dir_.string());
  auto second = Build(warm);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(warm.stats().disk_hits, 2);
  EXPECT_EQ(second->times.cache_hits, 2);
  EXPECT_EQ(warm.stats().blobs_mapped, static_cast<int64_t>(blobs));
  EXPECT_EQ(warm.stats().blobs_shared, static_cast<int64_t>(blobs));
  EXPECT_TRUE(second->check.ran);
  const std::vector<Tensor> want = Run(*first), got = Run(*second);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(std::memcmp(got[0].raw(), want[0].raw(), want[0].nbytes()), 0);
}

TEST_F(BlobBuildTest, MissingBlobsAreRebuiltAndWrittenAgain) {
  EngineCache cold(dir_.string());
  ASSERT_TRUE(Build(cold).ok());
  for (const fs::path& blob : FilesEndingIn(dir_, ".keb")) fs::remove(blob);
  EngineCache warm(dir_.string());
  auto rebuilt = Build(warm);
  ASSERT_TRUE(rebuilt.ok()) << rebuilt.status();
  // The first bucket's entry is refused and rebuilt, and its rebuild writes the blobs back:
  // the second bucket, which shares them, then hits.
  EXPECT_EQ(warm.stats().rejected_files, 1);
  EXPECT_EQ(rebuilt->times.cache_hits, 1);
  EXPECT_FALSE(FilesEndingIn(dir_, ".keb").empty());
  EngineCache again(dir_.string());
  auto third = Build(again);
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_EQ(third->times.cache_hits, 2);
}

// A warm build whose engines CachePrefetch rebuilt beforehand (as kilnd does beside the
// import) takes them all, and they answer as the cold build's.
TEST_F(BlobBuildTest, PrefetchedEnginesAreTakenAndAnswerAlike) {
  EngineCache cold(dir_.string());
  auto first = Build(cold);
  ASSERT_TRUE(first.ok()) << first.status();
  EngineCache warm(dir_.string());
  CacheContext context{&warm, ContentHash("mlp")};
  CachePrefetch prefetch(context, config_);
  context.prefetch = &prefetch;
  auto second = BuildModel(*graph_, config_, nullptr, context);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->times.cache_hits, 2);
  EXPECT_EQ(second->times.built_ahead, 2);
  EXPECT_EQ(warm.stats().disk_hits, 2);  // each entry read once, by the prefetch
  EXPECT_TRUE(second->check.ran);
  const std::vector<Tensor> want = Run(*first), got = Run(*second);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(std::memcmp(got[0].raw(), want[0].raw(), want[0].nbytes()), 0);
}

// A prefetched engine still faces the re-verification: entries whose stored answers are
// wrong are rebuilt, prefetch or not.
TEST_F(BlobBuildTest, PrefetchedEnginesAreStillReverified) {
  EngineCache cold(dir_.string());
  ASSERT_TRUE(Build(cold).ok());
  StoreWrongAnswers(cold, ContentHash("mlp"), config_, {1, 2});
  EngineCache warm(dir_.string());
  CacheContext context{&warm, ContentHash("mlp")};
  CachePrefetch prefetch(context, config_);
  context.prefetch = &prefetch;
  auto second = BuildModel(*graph_, config_, nullptr, context);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->times.cache_hits, 0);
  EXPECT_EQ(second->times.built_ahead, 0);
  EXPECT_TRUE(second->check.ok);
  EngineCache again(dir_.string());
  auto third = Build(again);
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_EQ(third->times.cache_hits, 2);  // the rebuilt entries were written back
}

// A small convolution chain (so the cpu engine has a layout to choose), two instances.
class TunedLayoutTest : public EngineCacheTest {
 protected:
  void SetUp() override {
    EngineCacheTest::SetUp();
    GraphBuilder b;
    Value* x = b.Input("x", DType::kFloat32, {1, 16, 12, 12});
    Tensor w(DType::kFloat32, {16, 16, 3, 3});
    for (int64_t i = 0; i < w.numel(); ++i) w.mutable_data<float>()[i] = 0.01f * (i % 7 - 3);
    Value* y =
        b.Op("Relu",
             {b.Op("Conv", {x, b.Constant("w1", w)}, {{"pads", Attribute::Ints({1, 1, 1, 1})}})});
    b.Output(b.Op("Conv", {y, b.Constant("w2", w)}, {{"pads", Attribute::Ints({1, 1, 1, 1})}}));
    graph_ = b.Build();
    config_.instances = 2;
    ASSERT_TRUE(FinalizeModelConfig(config_).ok());
  }
  absl::StatusOr<BuiltModel> Build(EngineCache& cache) {
    return BuildModel(*graph_, config_, nullptr, CacheContext{&cache, ContentHash("conv chain")});
  }
  std::unique_ptr<Graph> graph_;
  ModelConfig config_;
};

TEST_F(TunedLayoutTest, InstancesShareTheTunedLayoutAndAWarmStartReusesIt) {
  EngineCache cold(dir_.string());
  auto first = Build(cold);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(first->engines.size(), 1u);  // a fixed batch: one bucket
  const auto& instances = first->engines.begin()->second;
  ASSERT_EQ(instances.size(), 2u);
  const std::string layout = instances[0]->info().layout;
  EXPECT_TRUE(layout == "primitive" || layout == "blocked") << layout;
  EXPECT_GT(instances[0]->info().tune_ms, 0.0);  // measured once...
  EXPECT_EQ(instances[1]->info().layout, layout);
  EXPECT_EQ(instances[1]->info().tune_ms, 0.0);  // ...and the second instance took the result
  EngineCache warm(dir_.string());
  auto second = Build(warm);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(warm.stats().disk_hits, 1);
  const auto& again = second->engines.begin()->second;
  EXPECT_EQ(again[0]->info().layout, layout);
  EXPECT_EQ(again[0]->info().tune_ms, 0.0);  // the cache's choice, not a new measurement
}

TEST_F(TunedLayoutTest, AFixedLayoutIsNeverTuned) {
  config_.cpu_layout = "blocked";
  EngineCache cache("");
  auto built = Build(cache);
  ASSERT_TRUE(built.ok()) << built.status();
  for (const auto& engine : built->engines.begin()->second) {
    EXPECT_EQ(engine->info().layout, "blocked");
    EXPECT_EQ(engine->info().tune_ms, 0.0);
  }
  EXPECT_TRUE(built->check.ok);
}

}  // namespace
}  // namespace kiln::server
