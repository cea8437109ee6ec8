// Sample inputs shipped beside a model (server/model/warmup_samples.h): read from the ONNX test
// layout and named by proto name or position, fitted to the check's shapes (rows cycled to
// the batch), refused when a dtype or dim differs, and a sample's sequence length becomes
// the typical size of a dim no config names.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "compiler/onnx/tensor_proto.h"
#include "compiler/shape/infer.h"
#include "ir/builder.h"
#include "server/model/model_builder.h"
#include "server/model/warmup_samples.h"

namespace kiln::server {
namespace {
namespace fs = std::filesystem;

std::unique_ptr<Graph> Embed() {
  GraphBuilder b;
  Value* ids = b.Input("ids", DType::kInt64, {Dim::Symbol("batch"), Dim::Symbol("sequence")});
  Tensor table(DType::kFloat32, {50, 3});
  for (int64_t i = 0; i < table.numel(); ++i) table.mutable_data<float>()[i] = 0.01f * i;
  b.Output(b.Op("Tanh", {b.Op("Gather", {b.Constant("table", table), ids})}));
  return b.Build();
}

fs::path WriteSample(const std::string& tag, const Tensor& ids, const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("kiln_samples_" + tag);
  fs::remove_all(dir);
  fs::create_directories(dir / "test_data_set_0");
  EXPECT_TRUE(
      onnx_io::WriteTensorFile(ids, name, (dir / "test_data_set_0/input_0.pb").string()).ok());
  return dir;
}

Tensor Ids(int64_t rows, int64_t seq) {
  Tensor t(DType::kInt64, {rows, seq});
  for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<int64_t>()[i] = 40 + i % 7;
  return t;
}

TEST(WarmupSamples, ReadNamedByPositionAndFittedToTheBatch) {
  auto g = Embed();
  const fs::path dir = WriteSample("fit", Ids(1, 24), "not_an_input_name");
  auto s = ReadWarmupSamples(dir.string(), *g);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->sets.size(), 1u);
  EXPECT_TRUE(s->sets[0].count("ids"));  // by position
  EXPECT_FALSE(s->key.empty());
  EXPECT_EQ(SampleDims(*s, *g).at("sequence"), 24);
  auto raw = g->Clone();
  ASSERT_TRUE(shape::Specialize(*raw, 2, {{"sequence", 24}}).ok());
  auto feed = SampleFeed(*s, *raw, /*batchable=*/true);
  ASSERT_TRUE(feed.has_value());
  EXPECT_EQ(feed->at("ids").shape(), (std::vector<int64_t>{2, 24}));
  EXPECT_EQ(feed->at("ids").data<int64_t>()[24], 40);  // row 0 again
  // Another sequence length does not fit (the random feed is used then).
  auto other = g->Clone();
  ASSERT_TRUE(shape::Specialize(*other, 1, {{"sequence", 8}}).ok());
  EXPECT_FALSE(SampleFeed(*s, *other, true).has_value());
  // No folder: no samples, no error. A file that is no tensor: an error.
  EXPECT_TRUE(ReadWarmupSamples((dir / "none").string(), *g)->empty());
  std::ofstream(dir / "test_data_set_0/input_0.pb") << "garbage";
  EXPECT_FALSE(ReadWarmupSamples(dir.string(), *g).ok());
  // ... which the load logs and leaves out: the check falls back to random inputs.
  ModelConfig c;
  c.warmup.samples_dir = dir.string();
  EXPECT_TRUE(SamplesFor(*g, c).empty());
  EXPECT_TRUE(c.warmup.samples_key.empty());
}

TEST(WarmupSamples, ASampleSetsTheTypicalSizeAndIsChecked) {
  const fs::path dir = WriteSample("build", Ids(1, 24), "ids");
  ModelConfig config;
  config.max_batch_size = 2;
  ASSERT_TRUE(FinalizeModelConfig(config).ok());
  config.warmup.samples_dir = dir.string();
  auto built = BuildModel(*Embed(), config, nullptr);
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_EQ(built->signature.default_dims.at("sequence"), 24);
  EXPECT_TRUE(built->check.ok) << built->check.message;
  // Without the folder the default typical size.
  config.warmup.samples_dir.clear();
  auto plain = BuildModel(*Embed(), config, nullptr);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->signature.default_dims.at("sequence"), 128);
}

// int8's calibration feed: every set that fits, in name order, up to the limit; a set of
// another length is left out.
TEST(WarmupSamples, EverySetThatFitsIsACalibrationFeed) {
  auto g = Embed();
  const fs::path dir = fs::path(::testing::TempDir()) / "kiln_samples_many";
  fs::remove_all(dir);
  const int64_t lengths[] = {24, 24, 8, 24};
  for (int k = 0; k < 4; ++k) {
    const fs::path set = dir / ("test_data_set_" + std::to_string(k));
    fs::create_directories(set);
    Tensor ids = Ids(1, lengths[k]);
    ids.mutable_data<int64_t>()[0] = k;  // tells the sets apart
    ASSERT_TRUE(onnx_io::WriteTensorFile(ids, "ids", (set / "input_0.pb").string()).ok());
  }
  auto s = ReadWarmupSamples(dir.string(), *g);
  ASSERT_TRUE(s.ok()) << s.status();
  auto raw = g->Clone();
  ASSERT_TRUE(shape::Specialize(*raw, 1, {{"sequence", 24}}).ok());
  std::vector<ref::TensorMap> feeds = SampleFeeds(*s, *raw, /*batchable=*/true, 10);
  ASSERT_EQ(feeds.size(), 3u);
  EXPECT_EQ(feeds[0].at("ids").data<int64_t>()[0], 0);
  EXPECT_EQ(feeds[1].at("ids").data<int64_t>()[0], 1);
  EXPECT_EQ(feeds[2].at("ids").data<int64_t>()[0], 3);
  EXPECT_EQ(SampleFeeds(*s, *raw, true, 2).size(), 2u);
  EXPECT_EQ(SampleFeed(*s, *raw, true)->at("ids").data<int64_t>()[0], 0);  // the check's: first
}

}  // namespace
}  // namespace kiln::server
