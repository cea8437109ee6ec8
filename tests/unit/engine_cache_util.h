// Shared by the engine cache tests (server_engine_cache_test.cc,
// server_engine_cache_build_test.cc): keys, entries with and without weight blobs, file helpers and
// a fixture with its own folder.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>

#include "compiler/onnx/importer.h"
#include "ir/builder.h"
#include "server/model/engine_cache.h"
#include "server/model/engine_factory.h"
#include "server/model/model_builder.h"

namespace kiln::server::cache_test {

namespace fs = std::filesystem;

inline EngineCacheKey Key(int64_t batch = 1) {
  EngineCacheKey k;
  k.model_hash = ContentHash("model bytes");
  k.compiler_version = 7;
  k.options = "O2;passes=a,b;disabled=";
  k.device = DeviceFingerprint("cpu");
  k.batch = batch;
  return k;
}

inline EngineCacheEntry Entry() {
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

inline std::string ReadAll(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

inline void WriteAll(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
}

// For entries without blobs.
inline absl::StatusOr<Tensor> NoBlob(const std::string& id, size_t) {
  return absl::NotFoundError("no blob " + id);
}

// A float tensor of `n` values that differ from one `seed` to another.
inline Tensor Weights(int64_t n, float seed) {
  Tensor t(DType::kFloat32, {n});
  for (int64_t i = 0; i < n; ++i)
    t.mutable_data<float>()[i] = seed + 0.001f * static_cast<float>(i % 97);
  return t;
}

// An entry whose graph names one large constant, as EntryFor writes it.
inline EngineCacheEntry EntryWithBlob(const Tensor& weights) {
  EngineCacheEntry e = Entry();
  const auto location = BlobWriter(e)(weights);
  EXPECT_TRUE(location.has_value());
  e.graph_onnx = *location;  // stands in for the graph: only the blob list matters here
  return e;
}

inline std::vector<fs::path> FilesEndingIn(const fs::path& dir, const std::string& ext) {
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

// Rewrites the cached entry of each of `batches` (under the key kilnd would use for `config`)
// with its stored answers shifted by 0.5: a well-formed entry that must fail re-verification.
inline void StoreWrongAnswers(EngineCache& cache, const std::string& model_hash,
                              const ModelConfig& config, std::initializer_list<int64_t> batches) {
  PipelineOptions pipeline;
  pipeline.level = config.opt_level;
  pipeline.disabled = config.disabled_passes;
  for (const std::string& p : PassesOffOn(config.device)) pipeline.disabled.insert(p);  // as kilnd
  for (int64_t batch : batches) {
    const EngineCacheKey key =
        CacheKeyFor(CacheContext{&cache, model_hash}, config, pipeline, batch);
    auto entry = cache.Lookup(key);
    ASSERT_NE(entry, nullptr) << "batch " << batch;
    EngineCacheEntry wrong = *entry;
    for (auto& [name, t] : wrong.outputs) {
      Tensor shifted = t.Clone();
      for (int64_t i = 0; i < shifted.numel(); ++i) shifted.mutable_data<float>()[i] += 0.5f;
      t = shifted;
    }
    ASSERT_TRUE(cache.Store(key, std::move(wrong)).ok());
  }
}

}  // namespace kiln::server::cache_test
