// Loading models and test data for the command line.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "ir/graph.h"
#include "ops/interpreter.h"

namespace kiln::tools {

// A directory in the ONNX backend-test layout.
struct TestCase {
  std::string name;
  std::string dir;    // test data sets live here (test_data_set_*)
  std::string model;  // dir/model.onnx, or the .onnx file given directly
};

// A .onnx file (a test without data sets); PATH itself when it holds model.onnx; else every
// directory below it that does (sorted).
std::vector<TestCase> FindTestCases(const std::string& path);

struct DataSet {
  std::string name;
  std::vector<Tensor> inputs;   // input_K.pb in order
  std::vector<std::string> input_names;  // the TensorProto names (may be empty)
  std::vector<Tensor> outputs;  // output_K.pb in order
};

absl::StatusOr<std::vector<DataSet>> ReadDataSets(const std::string& dir);

// Matches data-set inputs to graph inputs: by TensorProto name where it names a graph input,
// else by position.
absl::StatusOr<ref::TensorMap> BindInputs(const Graph& graph, const DataSet& ds);

// Fixes the graph's input shapes to the fed tensors' shapes and re-runs shape inference.
absl::Status BindShapes(Graph& graph, const ref::TensorMap& inputs);

}  // namespace kiln::tools
