// Importing a model's large raw_data straight from its bytes (compiler/onnx/raw_slices.h):
// the same graph as protobuf's whole parse, for packed and plain types, small constants left
// alone; malformed or corrupted bytes behave as before; a location the model wrote itself in
// the reserved scheme is refused.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "compiler/onnx/exporter.h"
#include "compiler/onnx/importer.h"
#include "compiler/onnx/raw_slices.h"
#include "ir/builder.h"

namespace kiln::onnx_io {
namespace {

constexpr size_t kLarge = size_t{64} << 10;  // the importer's threshold

// x + big + small, and a Cast of a large int4 constant (packed two per byte in raw_data).
std::string ModelBytes() {
  GraphBuilder b(21);
  const int64_t n = kLarge / 4 + 5;
  Value* x = b.Input("x", DType::kFloat32, {n});
  Tensor big(DType::kFloat32, {n});
  for (int64_t i = 0; i < n; ++i) big.mutable_data<float>()[i] = 0.25f * static_cast<float>(i % 1001);
  Value* y = b.Op("Add", {x, b.Constant("big", big)});
  b.Output(b.Op("Mul", {y, b.Constant("small", Tensor::FromFloat({2.0f}, {1}))}));
  Tensor packed(DType::kInt4, {2 * static_cast<int64_t>(kLarge) + 3});
  for (int64_t i = 0; i < packed.numel(); ++i) packed.SetInt(i, i % 16 - 8);
  b.Output(b.Op("Cast", {b.Constant("nibbles", packed)}, {{"to", Attribute::Int(1)}}));
  absl::StatusOr<onnx::ModelProto> m = ExportModel(*b.Build());
  EXPECT_TRUE(m.ok()) << m.status();
  return m->SerializeAsString();
}

// The importer's answer when protobuf parses everything (what ImportModelBytes did before).
absl::StatusOr<std::unique_ptr<Graph>> ParsedWhole(std::string_view bytes) {
  onnx::ModelProto m;
  if (!m.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return absl::InvalidArgumentError("not a valid ONNX model (protobuf parse failed)");
  }
  return ImportModel(m);
}

void ExpectSameConstants(const Graph& a, const Graph& b) {
  ASSERT_EQ(a.nodes().size(), b.nodes().size());
  for (const auto& v : a.values()) {
    const Value* w = b.FindValue(v->name);
    ASSERT_NE(w, nullptr) << v->name;
    ASSERT_EQ(v->is_constant(), w->is_constant()) << v->name;
    if (!v->is_constant()) continue;
    ASSERT_EQ(v->constant->dtype(), w->constant->dtype()) << v->name;
    ASSERT_EQ(v->constant->shape(), w->constant->shape()) << v->name;
    EXPECT_EQ(std::memcmp(v->constant->raw(), w->constant->raw(), v->constant->nbytes()), 0)
        << v->name;
  }
}

TEST(RawSlices, TakesOnlyLargeRawData) {
  const std::string bytes = ModelBytes();
  std::optional<SplitModel> split = SplitRawData(bytes, kLarge);
  ASSERT_TRUE(split.has_value());
  EXPECT_EQ(split->slices.size(), 2u);  // big and nibbles, not small
  EXPECT_LT(split->bytes.size(), 1024u);  // the graph without its data
  for (const auto& [offset, length] : split->slices) {
    EXPECT_GE(length, kLarge);
    EXPECT_LE(offset + length, bytes.size());
  }
  EXPECT_FALSE(SplitRawData(bytes, bytes.size()).has_value());  // nothing that large
}

TEST(RawSlices, ImportIsTheSameAsAWholeParse) {
  const std::string bytes = ModelBytes();
  auto split = ImportModelBytes(bytes);
  auto whole = ParsedWhole(bytes);
  ASSERT_TRUE(split.ok()) << split.status();
  ASSERT_TRUE(whole.ok()) << whole.status();
  ExpectSameConstants(**whole, **split);
  EXPECT_EQ((*split)->FindValue("nibbles")->constant->GetInt(1), -7);
}

// Truncations and flipped bytes: the split import succeeds exactly when the whole parse does,
// with the same graph, and fails cleanly otherwise.
TEST(RawSlices, CorruptedBytesBehaveAsAWholeParse) {
  const std::string bytes = ModelBytes();
  std::mt19937 rng(7);
  for (int i = 0; i < 300; ++i) {
    std::string bad = bytes;
    if (i % 3 == 0) {
      bad.resize(rng() % bytes.size());
    } else {
      // Mostly where the structure is (the head and the tail), sometimes inside the data.
      const size_t at = i % 3 == 1 ? rng() % 200 : bytes.size() - 1 - rng() % 200;
      bad[at] = static_cast<char>(bad[at] ^ (1 << (rng() % 8)));
    }
    SCOPED_TRACE(i);
    auto split = ImportModelBytes(bad);
    auto whole = ParsedWhole(bad);
    ASSERT_EQ(split.ok(), whole.ok()) << (split.ok() ? whole.status() : split.status());
    if (split.ok()) ExpectSameConstants(**whole, **split);
  }
}

TEST(RawSlices, AReservedLocationWrittenByTheModelIsRefused) {
  onnx::ModelProto m;
  ASSERT_TRUE(m.ParseFromString(ModelBytes()));
  onnx::TensorProto* small = nullptr;
  for (auto& t : *m.mutable_graph()->mutable_initializer()) {
    if (t.name() == "small") small = &t;
  }
  ASSERT_NE(small, nullptr);
  small->clear_raw_data();
  small->set_data_location(onnx::TensorProto::EXTERNAL);
  auto* loc = small->add_external_data();
  loc->set_key("location");
  loc->set_value("kiln-raw:0:4");  // the model's own first bytes
  auto g = ImportModelBytes(m.SerializeAsString());
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("reserved"), std::string::npos) << g.status();
}

TEST(RawSlices, ParsesOnlyItsOwnLocations) {
  EXPECT_EQ(ParseRawSlice("kiln-raw:12:34"), std::make_pair(size_t{12}, size_t{34}));
  EXPECT_EQ(ParseRawSlice("kiln-raw:12"), std::nullopt);
  EXPECT_EQ(ParseRawSlice("kiln-raw:12:34x"), std::nullopt);
  EXPECT_EQ(ParseRawSlice("kiln-raw:-1:3"), std::nullopt);
  EXPECT_EQ(ParseRawSlice("weights.bin"), std::nullopt);
}

}  // namespace
}  // namespace kiln::onnx_io
