// The engine cache: the file format (round trip, corruption, stale keys, older versions),
// weight blobs (stored once for all buckets, mapped once per load, a missing, truncated or
// corrupt one detected), and memory and disk hits and evictions. BuildModel through the
// cache is server_engine_cache_build_test.cc.
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

using namespace cache_test;  // NOLINT: the helpers shared with the other half

namespace fs = std::filesystem;

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

}  // namespace
}  // namespace kiln::server
