#include "tools/kiln/model_io.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <onnx/onnx_pb.h>

#include "compiler/onnx/tensor_proto.h"
#include "compiler/shape/infer.h"

namespace kiln::tools {
namespace fs = std::filesystem;

std::vector<TestCase> FindTestCases(const std::string& path) {
  std::vector<TestCase> out;
  std::error_code ec;
  if (fs::is_regular_file(path, ec) && fs::path(path).extension() == ".onnx") {
    // A bare model: no data sets (the directory it sits in is not scanned for them).
    out.push_back({fs::path(path).stem().string(), "", path});
    return out;
  }
  if (fs::exists(fs::path(path) / "model.onnx", ec)) {
    out.push_back({fs::path(path).filename().string(), path, path + "/model.onnx"});
    return out;
  }
  if (!fs::is_directory(path, ec)) return out;
  std::vector<fs::path> dirs;
  for (const auto& e : fs::directory_iterator(path, ec)) {
    if (e.is_directory()) dirs.push_back(e.path());
  }
  std::sort(dirs.begin(), dirs.end());
  for (const auto& d : dirs) {
    auto sub = FindTestCases(d.string());
    out.insert(out.end(), sub.begin(), sub.end());
  }
  return out;
}

namespace {

// Reads prefix_0.pb, prefix_1.pb, ... until one is missing.
absl::Status ReadNumbered(const fs::path& dir, const std::string& prefix,
                          std::vector<Tensor>& tensors, std::vector<std::string>& names) {
  for (int k = 0;; ++k) {
    fs::path p = dir / (prefix + "_" + std::to_string(k) + ".pb");
    if (!fs::exists(p)) return absl::OkStatus();
    std::ifstream f(p, std::ios::binary);
    onnx::TensorProto proto;
    if (!proto.ParseFromIstream(&f)) {
      return absl::UnimplementedError(p.string() +
                                      " is not a tensor (sequences and optionals unsupported)");
    }
    if (!proto.has_data_type() && proto.dims_size() == 0 && !proto.has_raw_data()) {
      return absl::UnimplementedError(p.string() + " is not a plain tensor");
    }
    ASSIGN_OR_RETURN(Tensor t, onnx_io::TensorFromProto(proto));
    tensors.push_back(std::move(t));
    names.push_back(proto.name());
  }
}

}  // namespace

absl::StatusOr<std::vector<DataSet>> ReadDataSets(const std::string& dir) {
  std::vector<fs::path> sets;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.is_directory() && e.path().filename().string().rfind("test_data_set_", 0) == 0) {
      sets.push_back(e.path());
    }
  }
  std::sort(sets.begin(), sets.end());
  std::vector<DataSet> out;
  for (const auto& s : sets) {
    DataSet ds;
    ds.name = s.filename().string();
    std::vector<std::string> out_names;
    RETURN_IF_ERROR(ReadNumbered(s, "input", ds.inputs, ds.input_names));
    RETURN_IF_ERROR(ReadNumbered(s, "output", ds.outputs, out_names));
    out.push_back(std::move(ds));
  }
  return out;
}

absl::StatusOr<ref::TensorMap> BindInputs(const Graph& graph, const DataSet& ds) {
  ref::TensorMap feeds;
  bool by_name = !ds.inputs.empty();
  for (const std::string& n : ds.input_names) {
    Value* v = graph.FindValue(n);
    if (n.empty() || !v || std::find(graph.inputs.begin(), graph.inputs.end(), v) ==
                               graph.inputs.end()) {
      by_name = false;
    }
  }
  for (size_t k = 0; k < ds.inputs.size(); ++k) {
    if (by_name) {
      feeds[ds.input_names[k]] = ds.inputs[k];
    } else if (k < graph.inputs.size()) {
      feeds[graph.inputs[k]->name] = ds.inputs[k];
    } else {
      return absl::InvalidArgumentError("test data has more inputs than the graph");
    }
  }
  return feeds;
}

absl::Status BindShapes(Graph& graph, const ref::TensorMap& inputs) {
  for (Value* in : graph.inputs) {
    auto it = inputs.find(in->name);
    if (it == inputs.end()) continue;
    RETURN_IF_ERROR(ref::CheckInput(*in, it->second));
    in->shape = ToShape(it->second.shape());
  }
  for (const auto& n : graph.nodes()) {
    for (Value* out : n->outputs) {
      if (out && !out->constant) out->shape.reset();
    }
  }
  return shape::InferShapes(graph);
}

}  // namespace kiln::tools
