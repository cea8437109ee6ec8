// GraphBuilder: terse graph construction for tests and tools.
//
//   GraphBuilder b;
//   Value* x = b.Input("x", DType::kFloat32, {1, 3, 8, 8});
//   Value* w = b.Constant("w", Tensor::FromFloat(...));
//   Value* y = b.Op("Conv", {x, w}, {{"pads", Attribute::Ints({1, 1, 1, 1})}});
//   b.Output(y);
//   std::unique_ptr<Graph> g = b.Build();  // runs shape inference when asked
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace kiln {

class GraphBuilder {
 public:
  explicit GraphBuilder(int64_t opset = 21);

  Value* Input(const std::string& name, DType dtype, Shape shape);
  Value* Constant(const std::string& name, Tensor t);
  // Adds a node with one output and returns it.
  Value* Op(const std::string& op_type, std::vector<Value*> inputs,
            std::map<std::string, Attribute> attrs = {}, const std::string& domain = "");
  // Adds a node with `num_outputs` outputs.
  std::vector<Value*> OpN(const std::string& op_type, std::vector<Value*> inputs,
                          size_t num_outputs, std::map<std::string, Attribute> attrs = {},
                          const std::string& domain = "");
  void Output(Value* v);
  Graph& graph() { return *graph_; }
  std::unique_ptr<Graph> Build() { return std::move(graph_); }

 private:
  std::unique_ptr<Graph> graph_;
};

}  // namespace kiln
