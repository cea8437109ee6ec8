// ApplyDecoderDims: a decoder with past whose config gives its dims none gets the cache's
// length over its position table's context and the new positions as decode steps and prompt
// chunks; anything the config says, generation off, or a model that is no decoder, is left
// alone.
#include <gtest/gtest.h>

#include "compiler/shape/infer.h"
#include "ir/builder.h"
#include "server/model/bucket_engines.h"
#include "server/model/decoder_dims.h"
#include "tests/unit/info_engine.h"

namespace kiln::server {
namespace {

constexpr int64_t kVocab = 50, kTable = 300;

Tensor Filled(std::vector<int64_t> shape, float v) {
  Tensor t(DType::kFloat32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] = v;
  return t;
}

// A one-layer decoder with past as exporters name it: input_ids and position_ids [batch,
// sequence] (positions index a table of `table` rows; none when 0), attention_mask
// [batch, "past + sequence"], past_key_values.0.key [batch, 2, past, 4] -> present.0.key,
// logits [batch, sequence, vocab].
std::unique_ptr<Graph> Decoder(int64_t table = kTable, bool with_past = true) {
  GraphBuilder b(17);
  const Dim batch = Dim::Symbol("batch"), seq = Dim::Symbol("sequence");
  Value* ids = b.Input("input_ids", DType::kInt64, {batch, seq});
  Value* h = b.Op("Gather", {b.Constant("wte", Filled({kVocab, 4}, 0.1f)), ids});
  if (table > 0) {
    Value* pos = b.Input("position_ids", DType::kInt64, {batch, seq});
    h = b.Op("Add", {h, b.Op("Gather", {b.Constant("wpe", Filled({table, 4}, 0.2f)), pos})});
  }
  b.Input("attention_mask", DType::kInt64, {batch, Dim::Symbol("past + sequence")});
  b.Output(b.Op("MatMul", {h, b.Constant("head", Filled({4, kVocab}, 0.3f))}));
  b.graph().outputs.back()->name = "logits";
  if (with_past) {
    Value* past = b.Input("past_key_values.0.key", DType::kFloat32,
                          {batch, Dim(2), Dim::Symbol("past"), Dim(4)});
    Value* k = b.Op("Unsqueeze", {h, b.Constant("one", Tensor::FromInt64({1}, {1}))});
    Value* k2 = b.Op("Concat", {k, k}, {{"axis", Attribute::Int(1)}});
    b.Output(b.Op("Concat", {past, k2}, {{"axis", Attribute::Int(2)}}));
    b.graph().outputs.back()->name = "present.0.key";
  }
  std::unique_ptr<Graph> g = b.Build();
  EXPECT_TRUE(shape::InferShapes(*g).ok());
  return g;
}

TEST(DecoderDims, ADecoderWithNoConfigTakesItsTablesContextAndChunkClasses) {
  ModelConfig config;
  const std::string chose = ApplyDecoderDims(*Decoder(), config);
  EXPECT_NE(chose.find("'past' [0, 299]"), std::string::npos) << chose;
  EXPECT_NE(chose.find("300 rows"), std::string::npos) << chose;
  // From an empty cache (a first step), which shape classes pad to their first class.
  EXPECT_EQ(config.dynamic_dim_ranges.at("past"), (std::pair<int64_t, int64_t>{0, 299}));
  EXPECT_EQ(config.dynamic_dims.at("past"), 128);
  EXPECT_EQ(config.dynamic_dim_ranges.at("sequence"), (std::pair<int64_t, int64_t>{1, 64}));
  EXPECT_EQ(config.dynamic_dims.at("sequence"), 1);
  EXPECT_EQ(config.dynamic_dim_classes.at("sequence"), (std::vector<int64_t>{1, 64}));
}

TEST(DecoderDims, WithoutAPositionTableTheContextIsTheClassesLimit) {
  ModelConfig config;
  config.generation.prefill_chunk = 32;
  ASSERT_FALSE(ApplyDecoderDims(*Decoder(/*table=*/0), config).empty());
  EXPECT_EQ(config.dynamic_dim_ranges.at("past"), (std::pair<int64_t, int64_t>{0, 1023}));
  EXPECT_EQ(config.dynamic_dim_classes.at("sequence"), (std::vector<int64_t>{1, 32}));
  // A table of 20 rows: chunks no longer than the context.
  ModelConfig small;
  ASSERT_FALSE(ApplyDecoderDims(*Decoder(/*table=*/20), small).empty());
  EXPECT_EQ(small.dynamic_dim_ranges.at("past"), (std::pair<int64_t, int64_t>{0, 19}));
  EXPECT_EQ(small.dynamic_dim_ranges.at("sequence"), (std::pair<int64_t, int64_t>{1, 19}));
}

TEST(DecoderDims, LeavesWhatTheConfigSaysGenerationOffAndModelsThatAreNoDecoder) {
  ModelConfig given;
  given.dynamic_dim_ranges["past"] = {1, 50};
  EXPECT_EQ(ApplyDecoderDims(*Decoder(), given), "");
  EXPECT_FALSE(given.dynamic_dim_ranges.count("sequence"));
  ModelConfig typical;
  typical.dynamic_dims["sequence"] = 8;
  EXPECT_EQ(ApplyDecoderDims(*Decoder(), typical), "");
  EXPECT_FALSE(typical.dynamic_dim_ranges.count("past"));
  ModelConfig off;
  off.generation.mode = "off";
  EXPECT_EQ(ApplyDecoderDims(*Decoder(), off), "");
  EXPECT_TRUE(off.dynamic_dim_ranges.empty());
  ModelConfig no_cache;
  EXPECT_EQ(ApplyDecoderDims(*Decoder(kTable, /*with_past=*/false), no_cache), "");
  EXPECT_TRUE(no_cache.dynamic_dim_ranges.empty());
}

// A decoder served by several instances with the team left to kilnd is built on every core
// and run on its share (config.cpu_wide_runs); one instance, an explicit cpu_threads,
// generation off, another device or a model that is no decoder keep the narrow build.
TEST(WideRuns, OnlyADecoderOfSeveralInstancesWithItsTeamLeftToKilndRunsWide) {
  ModelConfig two;
  two.instances = 2;
  EXPECT_NE(ApplyWideRuns(*Decoder(), two), "");
  EXPECT_TRUE(two.cpu_wide_runs);
  EXPECT_EQ(CpuBuildThreads(two, 2), 2);
  EXPECT_EQ(CpuThreadsPerInstance(two, 2), 1);
  EXPECT_EQ(CpuBuildThreads(two, 8), 8);
  ModelConfig one;
  EXPECT_EQ(ApplyWideRuns(*Decoder(), one), "");
  ModelConfig pinned = two;
  pinned.cpu_wide_runs = false;
  pinned.cpu_threads = 1;
  EXPECT_EQ(ApplyWideRuns(*Decoder(), pinned), "");
  ModelConfig off = pinned;
  off.cpu_threads = 0;
  off.generation.mode = "off";
  EXPECT_EQ(ApplyWideRuns(*Decoder(), off), "");
  ModelConfig gpu = off;
  gpu.generation.mode = "auto";
  gpu.device = "cuda:0";
  EXPECT_EQ(ApplyWideRuns(*Decoder(), gpu), "");
  ModelConfig no_cache = gpu;
  no_cache.device = "cpu";
  EXPECT_EQ(ApplyWideRuns(*Decoder(kTable, /*with_past=*/false), no_cache), "");
  for (const ModelConfig* c : {&one, &pinned, &off, &gpu, &no_cache}) {
    EXPECT_FALSE(c->cpu_wide_runs);
    EXPECT_EQ(CpuBuildThreads(*c, 2), CpuThreadsPerInstance(*c, 2));
  }
}

std::unique_ptr<runtime::Engine> Settled(int threads, int max_threads) {
  runtime::EngineInfo info;
  info.threads = threads;
  info.max_threads = max_threads;
  info.layout = "primitive";
  return std::make_unique<testing_util::InfoEngine>(info);
}

// A shape's engines (the generation loop's shape classes) build from the model's config,
// which never went through ApplyWideRuns: they are wide where the model's first engine is,
// at its run team, and narrow where it settled on one thread or could not change its team.
TEST(WideRuns, AShapesEnginesAreBuiltWideWhereTheModelsFirstEngineIs) {
  ModelConfig config;
  config.instances = 2;
  BuiltModel base;
  base.engines[1].push_back(Settled(/*threads=*/1, /*max_threads=*/2));
  ModelConfig c = ShapeBuildConfig(config, base, {{"sequence", 64}}, 1, false);
  EXPECT_TRUE(c.cpu_wide_runs);
  EXPECT_EQ(c.cpu_threads, 1);
  EXPECT_EQ(c.cpu_layout, "primitive");
  EXPECT_EQ(CpuBuildThreads(c, 2), 2);
  EXPECT_EQ(CpuThreadsPerInstance(c, 2), 1);
  base.engines[1][0] = Settled(1, 1);  // settled on one thread
  EXPECT_FALSE(ShapeBuildConfig(config, base, {{"sequence", 64}}, 1, false).cpu_wide_runs);
  config.cpu_wide_runs = true;  // whatever the config carried, the first engine decides
  EXPECT_FALSE(ShapeBuildConfig(config, base, {{"sequence", 64}}, 1, false).cpu_wide_runs);
}

}  // namespace
}  // namespace kiln::server
