// Shared by the opset normalizer tests (normalize_test.cc, normalize_resize_test.cc): a graph
// built at an old opset, node counts, constant inputs and the normalize-and-verify step.
#pragma once

#include <gtest/gtest.h>

#include <cmath>

#include "compiler/onnx/normalize.h"
#include "ir/verifier.h"
#include "ops/interpreter.h"

namespace kiln::onnx_io::normalize_test {

// A graph whose ai.onnx opset is `opset`: every node added gets it as its imported version.
class OldGraph {
 public:
  explicit OldGraph(int64_t opset) { g.opsets[kOnnxDomain] = opset; }

  Value* Input(const std::string& name, DType dtype, std::optional<Shape> shape) {
    Value* v = g.AddValue(name);
    v->dtype = dtype;
    v->shape = std::move(shape);
    g.inputs.push_back(v);
    return v;
  }
  // Adds a node with `num_outputs` fresh outputs; the first is a graph output.
  Node* Op(const std::string& op, std::vector<Value*> ins, std::map<std::string, Attribute> attrs,
           size_t num_outputs = 1) {
    std::vector<Value*> outs;
    for (size_t i = 0; i < num_outputs; ++i) outs.push_back(g.NewValue(op + "_out"));
    Node* n = g.AddNode(op, std::move(ins), outs, op + "_node");
    n->attrs = std::move(attrs);
    if (g.outputs.empty()) g.outputs.push_back(outs[0]);
    return n;
  }

  Graph g;
};

inline int Count(const Graph& g, const std::string& op) {
  int c = 0;
  for (const auto& n : g.nodes()) c += n->op_type == op;
  return c;
}

inline std::vector<int64_t> ConstInts(const Value* v) {
  EXPECT_TRUE(v && v->is_constant());
  if (!v || !v->is_constant()) return {};
  EXPECT_EQ(v->constant->dtype(), DType::kInt64);
  return v->constant->ToInt64Vector();
}

inline void Normalize(Graph& g) {
  ASSERT_TRUE(NormalizeOperators(g).ok());
  absl::Status st = VerifyGraph(g);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(g.opsets.at(kOnnxDomain), kInternalOpset);
}

}  // namespace kiln::onnx_io::normalize_test
