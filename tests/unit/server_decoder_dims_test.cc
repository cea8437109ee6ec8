// ApplyDecoderDims: a decoder with past whose config gives its dims none gets the cache's
// length over its position table's context and the new positions as decode steps and prompt
// chunks; anything the config says, generation off, or a model that is no decoder, is left
// alone.
#include <gtest/gtest.h>

#include "compiler/shape/infer.h"
#include "ir/builder.h"
#include "server/model/decoder_dims.h"

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

}  // namespace
}  // namespace kiln::server
