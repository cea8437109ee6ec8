// The engine cache: the file format (round trip, corruption, stale keys), memory and disk
// hits, and BuildModel through the cache: a warm build skips compiling, a corrupt or stale
// file or an entry whose stored answers are wrong is rebuilt instead of trusted.
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "compiler/ir/builder.h"
#include "compiler/onnx/importer.h"
#include "server/engine_cache.h"
#include "server/model_builder.h"

namespace kiln::server {
namespace {
namespace fs = std::filesystem;

EngineCacheKey Key(int64_t batch = 1) {
  EngineCacheKey k;
  k.model_hash = ContentHash("model bytes");
  k.compiler_version = 7;
  k.options = "O2;passes=a,b;disabled=";
  k.device = DeviceFingerprint("cpu");
  k.batch = batch;
  return k;
}

EngineCacheEntry Entry() {
  EngineCacheEntry e;
  e.graph_onnx = std::string("\0graph\xff", 7);
  e.report_json = "{\"ops_after\":3}";
  e.disabled_passes = {"fuse_elementwise"};
  e.check_message = "disabled pass 'fuse_elementwise'";
  e.max_abs_err = 1e-6;
  e.checked = true;
  e.outputs.emplace_back("y", Tensor::FromFloat({1.5f, -2.0f, 3.25f}, {3}));
  e.engine_layout = "blocked";
  return e;
}

std::string ReadAll(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

void WriteAll(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
}

class EngineCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ("kiln_ec_" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST(ContentHash, IsStableAndTellsInputsApart) {
  EXPECT_EQ(ContentHash("abc"), ContentHash("abc"));
  EXPECT_EQ(ContentHash("abc").size(), 32u);
  EXPECT_NE(ContentHash("abc"), ContentHash("abd"));
  EXPECT_NE(ContentHash(""), ContentHash(std::string(1, '\0')));
  EXPECT_NE(ContentHash("12345678"), ContentHash("123456789"));
}

TEST(EngineCacheFormat, RoundTrips) {
  auto e = DecodeEntry(EncodeEntry(Key(), Entry()), Key());
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->graph_onnx, Entry().graph_onnx);
  EXPECT_EQ(e->report_json, Entry().report_json);
  EXPECT_EQ(e->disabled_passes, Entry().disabled_passes);
  EXPECT_EQ(e->check_message, Entry().check_message);
  EXPECT_TRUE(e->checked);
  ASSERT_EQ(e->outputs.size(), 1u);
  EXPECT_EQ(e->outputs[0].second.shape(), std::vector<int64_t>{3});
  EXPECT_EQ(e->outputs[0].second.data<float>()[2], 3.25f);
  EXPECT_EQ(e->engine_layout, "blocked");
}

TEST(EngineCacheFormat, RejectsCorruptionTruncationAndOtherKeys) {
  std::string bytes = EncodeEntry(Key(), Entry());
  std::string flipped = bytes;
  flipped[flipped.size() / 2] ^= 0x20;
  EXPECT_FALSE(DecodeEntry(flipped, Key()).ok());
  EXPECT_FALSE(DecodeEntry(bytes.substr(0, bytes.size() - 1), Key()).ok());
  EXPECT_FALSE(DecodeEntry("", Key()).ok());
  EngineCacheKey other = Key();
  other.compiler_version = 8;
  auto stale = DecodeEntry(bytes, other);
  ASSERT_FALSE(stale.ok());
  EXPECT_NE(stale.status().message().find("stale key"), std::string::npos);
}

TEST_F(EngineCacheTest, MissStoreThenMemoryAndDiskHits) {
  EngineCache cache(dir_.string());
  EXPECT_EQ(cache.Lookup(Key()), nullptr);
  ASSERT_TRUE(cache.Store(Key(), Entry()).ok());
  EXPECT_TRUE(fs::exists(cache.PathOf(Key())));
  ASSERT_NE(cache.Lookup(Key()), nullptr);
  EXPECT_EQ(cache.Lookup(Key(2)), nullptr);  // the batch size is part of the key
  EXPECT_EQ(cache.stats().memory_hits, 1);
  EXPECT_EQ(cache.stats().misses, 2);

  EngineCache restarted(dir_.string());  // a new process: nothing in memory
  auto e = restarted.Lookup(Key());
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->report_json, Entry().report_json);
  EXPECT_EQ(restarted.stats().disk_hits, 1);
}

TEST_F(EngineCacheTest, CorruptFileIsRejectedAndRemoved) {
  ASSERT_TRUE(EngineCache(dir_.string()).Store(Key(), Entry()).ok());
  const fs::path path = EngineCache(dir_.string()).PathOf(Key());
  std::string bytes = ReadAll(path);
  bytes[bytes.size() / 3] ^= 1;
  WriteAll(path, bytes);
  EngineCache cache(dir_.string());
  EXPECT_EQ(cache.Lookup(Key()), nullptr);
  EXPECT_EQ(cache.stats().rejected_files, 1);
  EXPECT_FALSE(fs::exists(path));
}

TEST_F(EngineCacheTest, FileUnderAnotherKeysNameIsStale) {
  EngineCache cache(dir_.string());
  ASSERT_TRUE(cache.Store(Key(1), Entry()).ok());
  EngineCacheKey newer = Key(1);
  newer.compiler_version = 8;  // the compiler changed since the file was written
  fs::copy_file(cache.PathOf(Key(1)), cache.PathOf(newer));
  EngineCache restarted(dir_.string());
  EXPECT_EQ(restarted.Lookup(newer), nullptr);
  EXPECT_EQ(restarted.stats().rejected_files, 1);
  EXPECT_NE(restarted.Lookup(Key(1)), nullptr);
}

TEST_F(EngineCacheTest, MemoryBudgetEvictsOldestButDiskKeepsIt) {
  EngineCache cache(dir_.string(), /*memory_budget_bytes=*/Entry().ApproxBytes());
  ASSERT_TRUE(cache.Store(Key(1), Entry()).ok());
  ASSERT_TRUE(cache.Store(Key(2), Entry()).ok());  // evicts Key(1) from memory
  EXPECT_NE(cache.Lookup(Key(2)), nullptr);
  EXPECT_EQ(cache.stats().memory_hits, 1);
  EXPECT_NE(cache.Lookup(Key(1)), nullptr);
  EXPECT_EQ(cache.stats().disk_hits, 1);
  EngineCache tiny(dir_.string(), /*memory_budget_bytes=*/1);  // too small for any entry
  EXPECT_NE(tiny.Lookup(Key(1)), nullptr);
  EXPECT_NE(tiny.Lookup(Key(1)), nullptr);
  EXPECT_EQ(tiny.stats().disk_hits, 2);
}

// BuildModel through the cache, on the example MLP and the cpu device.
class BuildThroughCacheTest : public EngineCacheTest {
 protected:
  void SetUp() override {
    EngineCacheTest::SetUp();
    const char* src = std::getenv("KILN_SOURCE_DIR");  // set by ctest
    if (!src) GTEST_SKIP() << "KILN_SOURCE_DIR is not set";
    const fs::path onnx =
        fs::path(src) / "config/models/example/1/model.onnx";
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
  PipelineOptions pipeline;
  pipeline.level = config_.opt_level;
  pipeline.disabled = config_.disabled_passes;
  for (int64_t batch : {1, 2}) {
    const EngineCacheKey key = CacheKeyFor(CacheContext{&cold, hash_}, config_, pipeline, batch);
    auto entry = cold.Lookup(key);
    ASSERT_NE(entry, nullptr);
    EngineCacheEntry wrong = *entry;
    for (auto& [name, t] : wrong.outputs) {
      Tensor shifted = t.Clone();
      for (int64_t i = 0; i < shifted.numel(); ++i) shifted.mutable_data<float>()[i] += 0.5f;
      t = shifted;
    }
    ASSERT_TRUE(cold.Store(key, std::move(wrong)).ok());
  }
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

// A small convolution chain (so the cpu engine has a layout to choose), two instances.
class TunedLayoutTest : public EngineCacheTest {
 protected:
  void SetUp() override {
    EngineCacheTest::SetUp();
    GraphBuilder b;
    Value* x = b.Input("x", DType::kFloat32, {1, 16, 12, 12});
    Tensor w(DType::kFloat32, {16, 16, 3, 3});
    for (int64_t i = 0; i < w.numel(); ++i) w.mutable_data<float>()[i] = 0.01f * (i % 7 - 3);
    Value* y = b.Op("Relu", {b.Op("Conv", {x, b.Constant("w1", w)},
                                  {{"pads", Attribute::Ints({1, 1, 1, 1})}})});
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
