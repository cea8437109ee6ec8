// The engine cache: the file format (round trip, corruption, stale keys, older versions),
// weight blobs (stored once for all buckets, mapped once per load, a missing, truncated or
// corrupt one detected), memory and disk hits, and BuildModel through the cache: a warm build
// skips compiling, a corrupt or stale file or an entry whose stored answers are wrong is
// rebuilt instead of trusted.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "compiler/onnx/importer.h"
#include "ir/builder.h"
#include "server/engine_cache.h"
#include "server/engine_factory.h"
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

// For entries without blobs.
absl::StatusOr<Tensor> NoBlob(const std::string& id, size_t) {
  return absl::NotFoundError("no blob " + id);
}

// A float tensor of `n` values that differ from one `seed` to another.
Tensor Weights(int64_t n, float seed) {
  Tensor t(DType::kFloat32, {n});
  for (int64_t i = 0; i < n; ++i) t.mutable_data<float>()[i] = seed + 0.001f * static_cast<float>(i % 97);
  return t;
}

// An entry whose graph names one large constant, as EntryFor writes it.
EngineCacheEntry EntryWithBlob(const Tensor& weights) {
  EngineCacheEntry e = Entry();
  const auto location = BlobWriter(e)(weights);
  EXPECT_TRUE(location.has_value());
  e.graph_onnx = *location;  // stands in for the graph: only the blob list matters here
  return e;
}

std::vector<fs::path> FilesEndingIn(const fs::path& dir, const std::string& ext) {
  std::vector<fs::path> out;
  for (const auto& f : fs::directory_iterator(dir)) {
    if (f.path().extension() == ext) out.push_back(f.path());
  }
  return out;
}

class EngineCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // The process id too: ctest runs this test and its .avx2 twin (another process) at once.
    dir_ = fs::path(::testing::TempDir()) /
           ("kiln_ec_" + std::to_string(getpid()) + "_" +
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
  auto e = DecodeEntry(EncodeEntry(Key(), Entry()), Key(), NoBlob);
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
  EXPECT_TRUE(e->blobs.empty());
}

TEST(EngineCacheFormat, ThreadChoiceRoundTrips) {
  EngineCacheEntry one = Entry();
  one.engine_threads = EngineCacheEntry::Threads::kOne;
  auto e = DecodeEntry(EncodeEntry(Key(), one), Key(), NoBlob);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->engine_threads, EngineCacheEntry::Threads::kOne);
}

// Small constants stay in the graph; large ones (stored byte for byte) become blobs named by
// their content, so equal weights are one blob.
TEST(EngineCacheBlobs, WriterTakesLargeConstantsByContent) {
  EngineCacheEntry e;
  const onnx_io::ExternalWriter write = BlobWriter(e);
  EXPECT_FALSE(write(Weights(16, 1.0f)).has_value());
  const Tensor big = Weights(kBlobMinBytes / 4, 1.0f);
  const auto a = write(big);
  const auto b = write(big.Clone());
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a, b);
  EXPECT_NE(write(Weights(kBlobMinBytes / 4, 2.0f)), a);
  ASSERT_EQ(e.blobs.size(), 2u);
  EXPECT_EQ(e.blobs.at(a->substr(5)).raw(), big.raw());  // the constant's bytes, not a copy
  // The resolver gives a typed view of the same bytes, and refuses another size.
  const onnx_io::ExternalResolver read = BlobResolver(e);
  auto t = read(*a, DType::kFloat32, {kBlobMinBytes / 4});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->data<float>()[5], big.data<float>()[5]);
  EXPECT_FALSE(read(*a, DType::kFloat32, {kBlobMinBytes / 4 - 1}).ok());
  EXPECT_FALSE(read("blob:0123", DType::kFloat32, {1}).ok());
}

TEST(EngineCacheFormat, AsksForEveryBlobAndFailsWithoutOne) {
  const Tensor w = Weights(kBlobMinBytes / 4, 3.0f);
  const EngineCacheEntry stored = EntryWithBlob(w);
  const std::string bytes = EncodeEntry(Key(), stored);
  std::vector<std::pair<std::string, size_t>> asked;
  auto e = DecodeEntry(bytes, Key(), [&](const std::string& id, size_t n) -> absl::StatusOr<Tensor> {
    asked.emplace_back(id, n);
    return stored.blobs.at(id);
  });
  ASSERT_TRUE(e.ok()) << e.status();
  ASSERT_EQ(asked.size(), 1u);
  EXPECT_EQ(asked[0].first, stored.blobs.begin()->first);
  EXPECT_EQ(asked[0].second, w.nbytes());
  EXPECT_EQ(e->blobs.size(), 1u);
  auto missing = DecodeEntry(bytes, Key(), NoBlob);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("blob"), std::string::npos);
}

// An entry of an older format (here: version 2, well-formed, with a valid checksum) is
// refused for its version, before anything else is read.
TEST(EngineCacheFormat, OlderFormatVersionIsRefused) {
  std::string bytes = EncodeEntry(Key(), Entry());
  const uint32_t v2 = 2;
  std::memcpy(bytes.data() + 8, &v2, sizeof v2);  // after the 8-byte magic
  const std::string body = bytes.substr(0, bytes.size() - 32);
  auto e = DecodeEntry(body + ContentHash(body), Key(), NoBlob);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("other format version"), std::string::npos);
}

TEST(EngineCacheFormat, RejectsCorruptionTruncationAndOtherKeys) {
  std::string bytes = EncodeEntry(Key(), Entry());
  std::string flipped = bytes;
  flipped[flipped.size() / 2] ^= 0x20;
  EXPECT_FALSE(DecodeEntry(flipped, Key(), NoBlob).ok());
  EXPECT_FALSE(DecodeEntry(bytes.substr(0, bytes.size() - 1), Key(), NoBlob).ok());
  EXPECT_FALSE(DecodeEntry("", Key(), NoBlob).ok());
  EngineCacheKey other = Key();
  other.compiler_version = 8;
  auto stale = DecodeEntry(bytes, other, NoBlob);
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

// Two buckets' entries with the same weights: one blob file, written once, mapped once by a
// new process and shared by both lookups.
TEST_F(EngineCacheTest, BucketsShareOneBlobWrittenAndMappedOnce) {
  const Tensor w = Weights(kBlobMinBytes / 4 + 3, 4.0f);
  EngineCache cache(dir_.string());
  ASSERT_TRUE(cache.Store(Key(1), EntryWithBlob(w)).ok());
  ASSERT_TRUE(cache.Store(Key(2), EntryWithBlob(w)).ok());
  EXPECT_EQ(cache.stats().blobs_written, 1);
  EXPECT_EQ(FilesEndingIn(dir_, ".kec").size(), 2u);
  ASSERT_EQ(FilesEndingIn(dir_, ".keb").size(), 1u);
  EXPECT_LT(fs::file_size(FilesEndingIn(dir_, ".keb")[0]), w.nbytes() + 100);

  EngineCache restarted(dir_.string(), /*memory_budget_bytes=*/1);  // every lookup from disk
  auto one = restarted.Lookup(Key(1));
  auto two = restarted.Lookup(Key(2));
  ASSERT_NE(one, nullptr);
  ASSERT_NE(two, nullptr);
  EXPECT_EQ(restarted.stats().disk_hits, 2);
  EXPECT_EQ(restarted.stats().blobs_mapped, 1);
  EXPECT_EQ(restarted.stats().blobs_shared, 1);
  const Tensor& a = one->blobs.begin()->second;
  const Tensor& b = two->blobs.begin()->second;
  EXPECT_EQ(a.raw(), b.raw());  // the same mapped pages
  EXPECT_EQ(std::memcmp(a.raw(), w.raw(), w.nbytes()), 0);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.raw()) % 64, 0u);  // a tensor may view it
  auto typed = BlobResolver(*one)(one->graph_onnx, DType::kFloat32, {w.numel()});
  ASSERT_TRUE(typed.ok()) << typed.status();
  EXPECT_EQ(typed->data<float>()[w.numel() - 1], w.data<float>()[w.numel() - 1]);
}

// A missing, truncated or corrupt blob makes its entry a miss: the entry file is removed
// (and the bad blob), so the rebuilt bucket writes both again.
TEST_F(EngineCacheTest, MissingTruncatedOrCorruptBlobIsAMiss) {
  const Tensor w = Weights(kBlobMinBytes / 4, 5.0f);
  for (const std::string damage : {"missing", "truncated", "corrupt"}) {
    SCOPED_TRACE(damage);
    fs::remove_all(dir_);
    ASSERT_TRUE(EngineCache(dir_.string()).Store(Key(), EntryWithBlob(w)).ok());
    const fs::path blob = FilesEndingIn(dir_, ".keb").at(0);
    std::string bytes = ReadAll(blob);
    if (damage == "missing") fs::remove(blob);
    if (damage == "truncated") WriteAll(blob, bytes.substr(0, bytes.size() - 1));
    if (damage == "corrupt") {
      bytes[bytes.size() - 100] ^= 0x01;
      WriteAll(blob, bytes);
    }
    EngineCache cache(dir_.string());
    EXPECT_EQ(cache.Lookup(Key()), nullptr);
    EXPECT_EQ(cache.stats().rejected_files, 1);
    EXPECT_FALSE(fs::exists(cache.PathOf(Key())));
    EXPECT_FALSE(fs::exists(blob));
    ASSERT_TRUE(cache.Store(Key(), EntryWithBlob(w)).ok());  // the rebuild
    EngineCache again(dir_.string());
    EXPECT_NE(again.Lookup(Key()), nullptr);
  }
}

TEST_F(EngineCacheTest, LeftoverTemporaryFilesAreRemoved) {
  fs::create_directories(dir_);
  WriteAll(dir_ / "abc.kec.tmp.123.0", "half");
  WriteAll(dir_ / "def.keb.tmp.123.1", "half");
  EngineCache cache(dir_.string());
  EXPECT_TRUE(fs::is_empty(dir_));
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
  for (const std::string& p : PassesOffOn(config_.device)) pipeline.disabled.insert(p);  // as kilnd
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
  PipelineOptions pipeline;
  pipeline.level = config_.opt_level;
  pipeline.disabled = config_.disabled_passes;
  for (const std::string& p : PassesOffOn(config_.device)) pipeline.disabled.insert(p);  // as kilnd
  for (int64_t batch : {1, 2}) {
    const EngineCacheKey key = CacheKeyFor(CacheContext{&cold, ContentHash("mlp")}, config_,
                                           pipeline, batch);
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
