#include "tests/cuda/kernel_check.h"

#include <cstring>

#include "compiler/codegen/emit.h"
#include "tests/cuda/host_kernels.h"

namespace kiln::testing {
namespace {

absl::StatusOr<const Tensor*> Lookup(const ref::TensorMap& values, const Value* v) {
  if (v->is_constant()) return &*v->constant;
  auto it = values.find(v->name);
  if (it == values.end()) return absl::InternalError("value '" + v->name + "' not computed");
  return &it->second;
}

// Unwritten output elements must not pass by luck: outputs start as all-ones bytes (NaN for
// floats).
void Poison(std::vector<Tensor>& outs) {
  for (Tensor& t : outs) {
    if (t.defined() && t.nbytes() > 0) std::memset(t.raw_mutable(), 0xff, t.nbytes());
  }
}

absl::Status CheckOne(const HostModule& m, const RecordedNode& r, const check::Tolerance& tol,
                      HostCheck& result) {
  std::vector<const Tensor*> ins;
  for (const Tensor& t : r.inputs) ins.push_back(t.defined() ? &t : nullptr);
  std::vector<Tensor> outs(r.node->outputs.size());
  for (size_t o = 0; o < outs.size(); ++o) {
    if (r.node->outputs[o]) outs[o] = Tensor(r.node->outputs[o]->dtype, r.want[o].shape());
  }
  Poison(outs);
  const absl::Status st = RunNodeKernels(m, r.kernels, *r.node, ins, outs);
  ++result.checked;
  if (!st.ok()) {
    result.failures.push_back(r.where + ": " + st.ToString());
    return absl::OkStatus();
  }
  for (size_t o = 0; o < r.want.size() && o < outs.size(); ++o) {
    if (!r.node->outputs[o] || !r.want[o].defined()) continue;
    const check::Divergence d = check::CompareTensors(outs[o], r.want[o], tol);
    if (!d.ok) result.failures.push_back(r.where + " output " + std::to_string(o) + ": " + d.message);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RecordGraph(std::shared_ptr<const Graph> graph, const ref::TensorMap& feeds,
                         const std::string& tag, std::vector<RecordedNode>& out, RecordStats& stats) {
  ref::TensorMap values = feeds;
  for (size_t i = 0; i < graph->nodes().size(); ++i) {
    const Node& node = *graph->nodes()[i];
    ref::KernelInputs ins;
    std::vector<Tensor> copies;
    for (const Value* v : node.inputs) {
      if (!v) {
        ins.push_back(nullptr);
        copies.emplace_back();
        continue;
      }
      ASSIGN_OR_RETURN(const Tensor* t, Lookup(values, v));
      ins.push_back(t);
      copies.push_back(*t);
    }
    ASSIGN_OR_RETURN(std::vector<Tensor> outs, ref::RunNode(node, ins));
    ++stats.nodes;
    for (size_t o = 0; o < node.outputs.size() && o < outs.size(); ++o) {
      if (node.outputs[o]) values[node.outputs[o]->name] = outs[o];
    }
    if (!codegen::HasGenerator(node)) continue;
    const std::string name = codegen::Identifier(tag + "_n" + std::to_string(i) + "_" + node.op_type);
    absl::StatusOr<std::vector<codegen::Kernel>> ks = codegen::EmitNodeKernels(node, name);
    if (!ks.ok()) {
      if (absl::IsUnimplemented(ks.status())) {
        ++stats.unsupported;
      } else {
        stats.errors.push_back(tag + ": " + ks.status().ToString());
      }
      continue;
    }
    ++stats.generated;
    stats.kernels += static_cast<int>(ks->size());
    out.push_back({tag + ": " + node.Describe(), graph, &node, std::move(*ks), std::move(copies), std::move(outs)});
  }
  return absl::OkStatus();
}

absl::StatusOr<HostCheck> CheckOnHost(const std::vector<RecordedNode>& nodes,
                                      const check::Tolerance& tol, size_t kernels_per_module) {
  HostCheck result;
  size_t begin = 0;
  while (begin < nodes.size()) {
    size_t end = begin, count = 0;
    std::vector<codegen::Kernel> kernels;
    while (end < nodes.size() && (count == 0 || count + nodes[end].kernels.size() <= kernels_per_module)) {
      for (const codegen::Kernel& k : nodes[end].kernels) kernels.push_back(k);
      count += nodes[end].kernels.size();
      ++end;
    }
    ASSIGN_OR_RETURN(std::unique_ptr<HostModule> m, HostModule::Compile(kernels, HostKernelDir()));
    for (size_t i = begin; i < end; ++i) RETURN_IF_ERROR(CheckOne(*m, nodes[i], tol, result));
    begin = end;
  }
  return result;
}

}  // namespace kiln::testing
