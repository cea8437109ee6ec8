// What a model's own counts may cost the importer. A node's attributes are copied with every
// copy of the graph (the reference's, each bucket's compile, the engine cache's export), so
// an 18 MB model naming a million of them cost kilnd 18 s and 2 GB to load. The importer
// refuses such a node with INVALID_ARGUMENT from a walk of the bytes, before the protobuf
// parse builds the million.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <chrono>
#include <fstream>
#include <string>

#include "compiler/onnx/importer.h"

namespace kiln {
namespace {

// Relu(x) with `n` attributes named a0, a1, ... (or all named `a` when `same_name`).
std::string ReluWithAttributes(int n, bool same_name = false) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* g = m.mutable_graph();
  g->set_name("g");
  for (auto [v, name] : {std::pair(g->add_input(), "x"), std::pair(g->add_output(), "y")}) {
    v->set_name(name);
    auto* tt = v->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(onnx::TensorProto::FLOAT);
    tt->mutable_shape()->add_dim()->set_dim_value(2);
  }
  auto* node = g->add_node();
  node->set_op_type("Relu");
  node->add_input("x");
  node->add_output("y");
  for (int i = 0; i < n; ++i) {
    auto* a = node->add_attribute();
    a->set_name(same_name ? "a" : "a" + std::to_string(i));
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(i);
  }
  return m.SerializeAsString();
}

// Peak resident memory since the last reset, in MB (Linux: VmHWM, reset by clear_refs 5).
double PeakMb() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  }
  return 0;
}

TEST(ImportBounds, ANodeWithAMillionAttributesIsRefusedCheaply) {
  const std::string bytes = ReluWithAttributes(1000000);
  std::ofstream("/proc/self/clear_refs") << "5";
  const double before = PeakMb();
  const auto t0 = std::chrono::steady_clock::now();
  auto g = onnx_io::ImportModelBytes(bytes);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_FALSE(g.ok()) << "imported a node with 1,000,000 attributes";
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(g.status().message().find("1000000 attributes"), std::string::npos) << g.status();
  std::printf("%.1f MB model: refused in %.2f s, peak RSS +%.0f MB\n", bytes.size() / 1e6, seconds,
              PeakMb() - before);
  // A walk of the wire format, before protobuf builds a message per attribute (that parse
  // alone took 3.5-8 s on a loaded 2-core machine).
  EXPECT_LT(seconds, 1.0);
}

TEST(ImportBounds, AttributeCountsAtTheBoundAndNamesUsedTwice) {
  EXPECT_TRUE(onnx_io::ImportModelBytes(ReluWithAttributes(256)).ok());
  EXPECT_EQ(onnx_io::ImportModelBytes(ReluWithAttributes(257)).status().code(),
            absl::StatusCode::kInvalidArgument);
  // A model parsed by the caller is checked node by node.
  onnx::ModelProto parsed;
  ASSERT_TRUE(parsed.ParseFromString(ReluWithAttributes(257)));
  EXPECT_EQ(onnx_io::ImportModel(parsed).status().code(), absl::StatusCode::kInvalidArgument);
  // Two values under one name: the second silently replaced the first.
  const auto twice = onnx_io::ImportModelBytes(ReluWithAttributes(2, /*same_name=*/true));
  EXPECT_EQ(twice.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(twice.status().message().find("'a' appears twice"), std::string::npos)
      << twice.status();
}

}  // namespace
}  // namespace kiln
