// Shared by the hostile-model tests (bad_models_test.cc, bad_initializers_test.cc): ONNX models
// built in code, the import -> shape inference -> reference pipeline they are fed through, a
// folder for external data, and EXPECT_CODE.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <random>

#include "compiler/onnx/importer.h"
#include "compiler/shape/infer.h"
#include "ir/verifier.h"
#include "ops/interpreter.h"

namespace kiln::bad_models {

namespace fs = std::filesystem;
using onnx::TensorProto;

// ---- model construction -----------------------------------------------------------------

inline onnx::ModelProto BaseModel(int64_t opset = 17) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  auto* op = m.add_opset_import();
  op->set_domain("");
  op->set_version(opset);
  m.mutable_graph()->set_name("bad");
  return m;
}

inline void AddValueInfo(onnx::ValueInfoProto* v, const std::string& name, int elem_type,
                         const std::vector<int64_t>& dims) {
  v->set_name(name);
  auto* tt = v->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(elem_type);
  auto* shape = tt->mutable_shape();
  for (int64_t d : dims) shape->add_dim()->set_dim_value(d);
}

inline void AddInput(onnx::ModelProto& m, const std::string& name, std::vector<int64_t> dims = {2},
                     int elem_type = TensorProto::FLOAT) {
  AddValueInfo(m.mutable_graph()->add_input(), name, elem_type, dims);
}

inline void AddOutput(onnx::ModelProto& m, const std::string& name) {
  auto* out = m.mutable_graph()->add_output();
  out->set_name(name);
  out->mutable_type()->mutable_tensor_type()->set_elem_type(TensorProto::FLOAT);
}

inline onnx::NodeProto* AddNode(onnx::ModelProto& m, const std::string& op,
                                const std::vector<std::string>& ins,
                                const std::vector<std::string>& outs) {
  auto* n = m.mutable_graph()->add_node();
  n->set_op_type(op);
  n->set_name(op + "_" + std::to_string(m.graph().node_size()));
  for (const auto& i : ins) n->add_input(i);
  for (const auto& o : outs) n->add_output(o);
  return n;
}

inline TensorProto* AddInitializer(onnx::ModelProto& m, const std::string& name,
                                   const std::vector<int64_t>& dims,
                                   int type = TensorProto::FLOAT) {
  auto* t = m.mutable_graph()->add_initializer();
  t->set_name(name);
  t->set_data_type(type);
  for (int64_t d : dims) t->add_dims(d);
  return t;
}

inline void AddIntsAttr(onnx::NodeProto* n, const std::string& name,
                        const std::vector<int64_t>& v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}

// x -> Relu -> y: the valid starting point most cases break one thing of.
inline onnx::ModelProto ReluModel() {
  onnx::ModelProto m = BaseModel();
  AddInput(m, "x");
  AddNode(m, "Relu", {"x"}, {"y"});
  AddOutput(m, "y");
  return m;
}

// ---- the pipeline ------------------------------------------------------------------------

// Zero feeds for every graph input (symbolic dims bound to 1).
inline absl::StatusOr<ref::TensorMap> ZeroFeeds(const Graph& g) {
  ref::TensorMap feeds;
  for (const Value* in : g.inputs) {
    if (!in->shape || !IsSupportedDType(in->dtype)) {
      return absl::InvalidArgumentError("input '" + in->name + "' cannot be fed");
    }
    std::vector<int64_t> dims;
    for (const Dim& d : *in->shape) dims.push_back(d.known() ? d.value : 1);
    if (NumElements(dims) > (1 << 20)) return absl::ResourceExhaustedError("feed too big");
    feeds[in->name] = Tensor(in->dtype, dims);
  }
  return feeds;
}

inline absl::Status RunGraph(std::unique_ptr<Graph> g) {
  RETURN_IF_ERROR(VerifyGraph(*g));  // an imported graph always verifies, or import failed
  RETURN_IF_ERROR(shape::InferShapes(*g));
  ASSIGN_OR_RETURN(ref::TensorMap feeds, ZeroFeeds(*g));
  return ref::Run(*g, feeds).status();
}

inline absl::Status Pipeline(const std::string& bytes) {
  ASSIGN_OR_RETURN(std::unique_ptr<Graph> g, onnx_io::ImportModelBytes(bytes));
  return RunGraph(std::move(g));
}

inline absl::Status Pipeline(const onnx::ModelProto& m) {
  std::string bytes;
  EXPECT_TRUE(m.SerializeToString(&bytes));
  return Pipeline(bytes);
}

// Writes the model into a fresh folder and imports it by path (external data resolves
// relative to that folder).
class ModelDir {
 public:
  ModelDir() {
    static int counter = 0;
    root_ = fs::temp_directory_path() /
            ("kiln_bad_models_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::create_directories(root_ / "model");
  }
  ~ModelDir() {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  fs::path model_dir() const { return root_ / "model"; }
  fs::path root() const { return root_; }
  void WriteFile(const fs::path& path, const std::string& bytes) const {
    std::ofstream(path, std::ios::binary) << bytes;
  }
  absl::Status Run(const onnx::ModelProto& m) const {
    const fs::path path = model_dir() / "model.onnx";
    WriteFile(path, m.SerializeAsString());
    ASSIGN_OR_RETURN(std::unique_ptr<Graph> g, onnx_io::ImportModelFile(path.string()));
    return RunGraph(std::move(g));
  }

 private:
  fs::path root_;
};

#define EXPECT_CODE(status, want)                         \
  do {                                                    \
    const absl::Status st_ = (status);                    \
    EXPECT_EQ(st_.code(), absl::StatusCode::want) << st_; \
  } while (0)

}  // namespace kiln::bad_models
