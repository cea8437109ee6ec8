#include "ir/builder.h"

namespace kiln {

GraphBuilder::GraphBuilder(int64_t opset) : graph_(std::make_unique<Graph>()) {
  graph_->name = "built";
  graph_->opsets[kOnnxDomain] = opset;
  graph_->opsets[kKilnDomain] = 1;
}

Value* GraphBuilder::Input(const std::string& name, DType dtype, Shape shape) {
  Value* v = graph_->AddValue(name);
  v->dtype = dtype;
  v->shape = std::move(shape);
  graph_->inputs.push_back(v);
  return v;
}

Value* GraphBuilder::Constant(const std::string& name, Tensor t) {
  return graph_->AddConstant(name, std::move(t));
}

Value* GraphBuilder::Op(const std::string& op_type, std::vector<Value*> inputs,
                        std::map<std::string, Attribute> attrs, const std::string& domain) {
  return OpN(op_type, std::move(inputs), 1, std::move(attrs), domain)[0];
}

std::vector<Value*> GraphBuilder::OpN(const std::string& op_type, std::vector<Value*> inputs,
                                      size_t num_outputs, std::map<std::string, Attribute> attrs,
                                      const std::string& domain) {
  std::vector<Value*> outs;
  for (size_t i = 0; i < num_outputs; ++i) outs.push_back(graph_->NewValue(op_type + "_out"));
  Node* n = graph_->AddNode(op_type, std::move(inputs), outs);
  n->domain = domain;
  n->opset = graph_->opsets[domain];
  n->attrs = std::move(attrs);
  return outs;
}

void GraphBuilder::Output(Value* v) { graph_->outputs.push_back(v); }

}  // namespace kiln
