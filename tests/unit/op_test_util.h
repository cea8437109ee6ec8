// Helpers for operator tests: run one node through shape inference and the reference
// interpreter (checking that the inferred shapes match the computed ones), or straight
// through its kernel so that kernel-side validation is what is tested.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "compiler/shape/infer.h"
#include "ir/builder.h"
#include "ops/interpreter.h"

namespace kiln::optest {

using Attrs = std::map<std::string, Attribute>;

// Runs one node whose inputs are graph inputs fed with `inputs` (an undefined Tensor is an
// omitted optional input), after shape inference. Omitted outputs: "" in `skip_outputs`.
inline absl::StatusOr<std::vector<Tensor>> RunOp(const std::string& op,
                                                 const std::vector<Tensor>& inputs,
                                                 Attrs attrs = {}, size_t num_outputs = 1,
                                                 const std::string& domain = "") {
  GraphBuilder b;
  std::vector<Value*> ins;
  ref::TensorMap feeds;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) {
      ins.push_back(nullptr);
      continue;
    }
    const std::string name = "in" + std::to_string(i);
    ins.push_back(b.Input(name, inputs[i].dtype(), ToShape(inputs[i].shape())));
    feeds[name] = inputs[i];
  }
  std::vector<Value*> outs = b.OpN(op, ins, num_outputs, std::move(attrs), domain);
  for (Value* o : outs) b.Output(o);
  std::unique_ptr<Graph> g = b.Build();
  RETURN_IF_ERROR(shape::InferShapes(*g));
  ASSIGN_OR_RETURN(ref::TensorMap result, ref::Run(*g, feeds));
  std::vector<Tensor> ordered;
  for (Value* o : g->outputs) {
    if (o->shape && IsStatic(*o->shape)) {
      EXPECT_EQ(StaticDims(*o->shape), result[o->name].shape()) << "output " << o->name;
    }
    ordered.push_back(result[o->name]);
  }
  return ordered;
}

// Runs only the kernel (no shape inference).
inline absl::StatusOr<std::vector<Tensor>> RunKernel(const std::string& op,
                                                     const std::vector<Tensor>& inputs,
                                                     Attrs attrs = {}, size_t num_outputs = 1) {
  GraphBuilder b;
  std::vector<Value*> ins;
  ref::KernelInputs kin;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) {
      ins.push_back(nullptr);
      kin.push_back(nullptr);
      continue;
    }
    ins.push_back(b.Input("in" + std::to_string(i), inputs[i].dtype(), {}));
    kin.push_back(&inputs[i]);
  }
  b.OpN(op, ins, num_outputs, std::move(attrs));
  std::unique_ptr<Graph> g = b.Build();
  return ref::RunNode(*g->nodes()[0], kin);
}

// Shape inference alone on one node with inputs of the given dtypes and shapes; returns the
// inferred output shapes (nullopt = unknown rank).
inline absl::StatusOr<std::vector<std::optional<Shape>>> InferOp(
    const std::string& op, const std::vector<std::pair<DType, Shape>>& inputs, Attrs attrs = {},
    size_t num_outputs = 1) {
  GraphBuilder b;
  std::vector<Value*> ins;
  for (size_t i = 0; i < inputs.size(); ++i) {
    ins.push_back(inputs[i].first == DType::kUndefined
                      ? nullptr
                      : b.Input("in" + std::to_string(i), inputs[i].first, inputs[i].second));
  }
  std::vector<Value*> outs = b.OpN(op, ins, num_outputs, std::move(attrs));
  for (Value* o : outs) b.Output(o);
  std::unique_ptr<Graph> g = b.Build();
  RETURN_IF_ERROR(shape::InferShapes(*g));
  std::vector<std::optional<Shape>> shapes;
  for (Value* o : g->outputs) shapes.push_back(o->shape);
  return shapes;
}

inline Tensor Floats(std::vector<float> v, std::vector<int64_t> shape) {
  return Tensor::FromFloat(v, std::move(shape));
}

inline Tensor Ints64(std::vector<int64_t> v, std::vector<int64_t> shape) {
  return Tensor::FromInt64(v, std::move(shape));
}

// A tensor of `dtype` holding `v` (converted through SetDouble).
inline Tensor Typed(DType dtype, const std::vector<double>& v, std::vector<int64_t> shape) {
  Tensor t(dtype, std::move(shape));
  for (size_t i = 0; i < v.size(); ++i) t.SetDouble(static_cast<int64_t>(i), v[i]);
  return t;
}

inline Tensor Iota(std::vector<int64_t> shape, float start = 0.0f, float step = 1.0f) {
  Tensor t(DType::kFloat32, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] = start + step * i;
  return t;
}

inline void ExpectValues(const Tensor& t, const std::vector<double>& want, double tol = 1e-5) {
  ASSERT_EQ(t.numel(), static_cast<int64_t>(want.size()));
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(t.GetDouble(i), want[i], tol) << "at " << i;
}

inline void ExpectInvalid(const absl::Status& st) {
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
}

inline Attribute Int(int64_t v) { return Attribute::Int(v); }
inline Attribute Float(float v) { return Attribute::Float(v); }
inline Attribute Str(std::string v) { return Attribute::String(std::move(v)); }
inline Attribute Ints(std::vector<int64_t> v) { return Attribute::Ints(std::move(v)); }

}  // namespace kiln::optest
