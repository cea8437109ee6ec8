// ONNX protos written by hand for the importer's and the control-flow passes' tests: graph
// inputs and outputs, nodes (named after their op and first output), and graph attributes
// (an If's branches, a Loop's body).
#pragma once

#include <onnx/onnx_pb.h>

#include <string>
#include <vector>

namespace kiln::testing {

inline void AddInput(onnx::GraphProto* g, const std::string& name, int elem,
                     const std::vector<int64_t>& dims) {
  auto* v = g->add_input();
  v->set_name(name);
  auto* tt = v->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(elem);
  auto* s = tt->mutable_shape();
  for (int64_t d : dims) s->add_dim()->set_dim_value(d);
}

inline void AddOutput(onnx::GraphProto* g, const std::string& name) {
  g->add_output()->set_name(name);
}

inline onnx::NodeProto* AddNode(onnx::GraphProto* g, const std::string& op,
                                const std::vector<std::string>& in,
                                const std::vector<std::string>& out) {
  auto* n = g->add_node();
  n->set_op_type(op);
  n->set_name(op + "_" + out.at(0));
  for (const auto& i : in) n->add_input(i);
  for (const auto& o : out) n->add_output(o);
  return n;
}

inline onnx::AttributeProto* GraphAttr(onnx::NodeProto* n, const std::string& name) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::GRAPH);
  return a;
}

// The graph attribute `name` of `n` (an If's then_branch/else_branch), named the same.
inline onnx::GraphProto* Branch(onnx::NodeProto* n, const std::string& name) {
  onnx::GraphProto* g = GraphAttr(n, name)->mutable_g();
  g->set_name(name);
  return g;
}

}  // namespace kiln::testing
