#include "compiler/onnx/exporter.h"

#include <fstream>
#include <limits>
#include <optional>
#include <set>
#include <unordered_set>

#include "compiler/onnx/tensor_proto.h"

namespace kiln::onnx_io {
namespace {

// IR version 8 (ONNX 1.10+): the newest that ONNX 1.12's checker and every runtime Kiln is
// compared with accept, and new enough for initializers that are not graph inputs.
constexpr int64_t kIrVersion = 8;

void WriteShape(const Shape& shape, onnx::TensorShapeProto* out) {
  for (const Dim& d : shape) {
    auto* dim = out->add_dim();
    if (d.known()) {
      dim->set_dim_value(d.value);
    } else if (!d.param.empty()) {
      dim->set_dim_param(d.param);
    }  // else: an unknown dim is a dim with neither field
  }
}

// Writes what the graph knows about `v`: nothing known leaves the type unset.
void WriteValueInfo(const Value& v, onnx::ValueInfoProto* out) {
  out->set_name(v.name);
  if (v.dtype == DType::kUndefined && !v.shape) return;
  auto* tt = out->mutable_type()->mutable_tensor_type();
  if (v.dtype != DType::kUndefined) tt->set_elem_type(static_cast<int32_t>(v.dtype));
  if (v.shape) WriteShape(*v.shape, tt->mutable_shape());
}

// Bodies (GRAPH attributes) are written with their constants inline.
void WriteGraph(const Graph& graph, onnx::GraphProto* g, const ExternalWriter* external = nullptr);

void WriteAttribute(const std::string& name, const Attribute& a, onnx::AttributeProto* out) {
  out->set_name(name);
  switch (a.kind) {
    case Attribute::Kind::kInt:
      out->set_type(onnx::AttributeProto::INT);
      out->set_i(a.i);
      break;
    case Attribute::Kind::kFloat:
      out->set_type(onnx::AttributeProto::FLOAT);
      out->set_f(a.f);
      break;
    case Attribute::Kind::kString:
      out->set_type(onnx::AttributeProto::STRING);
      out->set_s(a.s);
      break;
    case Attribute::Kind::kTensor:
      out->set_type(onnx::AttributeProto::TENSOR);
      *out->mutable_t() = TensorToProto(a.t, "");
      break;
    case Attribute::Kind::kInts:
      out->set_type(onnx::AttributeProto::INTS);
      for (int64_t v : a.ints) out->add_ints(v);
      break;
    case Attribute::Kind::kFloats:
      out->set_type(onnx::AttributeProto::FLOATS);
      for (float v : a.floats) out->add_floats(v);
      break;
    case Attribute::Kind::kStrings:
      out->set_type(onnx::AttributeProto::STRINGS);
      for (const auto& v : a.strings) out->add_strings(v);
      break;
    case Attribute::Kind::kGraph:
      out->set_type(onnx::AttributeProto::GRAPH);
      if (a.g) WriteGraph(*a.g, out->mutable_g());
      break;
  }
}

// A body reads a capture by the name it was imported with; when the outer value feeding it
// now has another name (an outer pass replaced it), an Identity at the start of every body
// of the node bridges the two.
void BridgeCaptures(const Node& n, onnx::NodeProto* out) {
  const size_t first = n.inputs.size() - n.captures.size();
  for (auto& a : *out->mutable_attribute()) {
    if (a.type() != onnx::AttributeProto::GRAPH) continue;
    onnx::GraphProto* body = a.mutable_g();
    for (size_t i = 0; i < n.captures.size(); ++i) {
      const Value* outer = n.inputs[first + i];
      if (!outer || outer->name == n.captures[i]) continue;
      onnx::NodeProto* bridge = body->add_node();
      bridge->set_op_type("Identity");
      bridge->set_name(n.captures[i] + "_capture");
      bridge->add_input(outer->name);
      bridge->add_output(n.captures[i]);
      // The body stays sorted: the bridge moves to the front.
      for (int k = body->node_size() - 1; k > 0; --k) body->mutable_node()->SwapElements(k, k - 1);
    }
  }
}

void WriteNode(const Node& n, onnx::NodeProto* out) {
  out->set_name(n.name);
  out->set_op_type(n.op_type);
  if (!n.domain.empty()) out->set_domain(n.domain);
  // Omitted optional inputs/outputs are empty names; ONNX allows trailing ones to be left
  // out, but keeping them makes the round trip exact.
  // Captured outer values are not ONNX inputs: the bodies read them by name.
  const size_t explicit_inputs = n.inputs.size() - n.captures.size();
  for (size_t i = 0; i < explicit_inputs; ++i) {
    out->add_input(n.inputs[i] ? n.inputs[i]->name : "");
  }
  for (const Value* o : n.outputs) out->add_output(o ? o->name : "");
  for (const auto& [key, attr] : n.attrs) {
    // Kiln's planning marks on ai.onnx nodes (kiln_view) are not ONNX attributes: other
    // runtimes reject unknown attributes, and the optimizer re-derives them on import.
    if (n.domain.empty() && key.rfind("kiln_", 0) == 0) continue;
    WriteAttribute(key, attr, out->add_attribute());
  }
  if (!n.captures.empty()) BridgeCaptures(n, out);
}

// One opset_import per domain: the graph's declared versions, plus any domain a node uses
// that the graph does not declare (at the newest version its nodes were imported with;
// Kiln's own domain starts at 1).
void WriteOpsets(const Graph& graph, onnx::ModelProto& model) {
  std::map<std::string, int64_t> versions;
  for (const auto& [domain, version] : graph.opsets) {
    if (version > 0) versions[domain] = version;
  }
  for (const auto& n : graph.nodes()) {
    if (graph.opsets.count(n->domain) && graph.opsets.at(n->domain) > 0) continue;
    int64_t& v = versions[n->domain];
    v = std::max({v, n->opset, int64_t{1}});
  }
  if (versions.empty()) versions[kOnnxDomain] = 1;  // a model imports at least one opset
  for (const auto& [domain, version] : versions) {
    auto* op = model.add_opset_import();
    op->set_domain(domain);
    op->set_version(version);
  }
}

// Every node input must be a graph input, a constant or an earlier node's output, or the
// written model would not load anywhere.
absl::Status CheckDefined(const Graph& graph) {
  std::unordered_set<const Value*> defined(graph.inputs.begin(), graph.inputs.end());
  for (const auto& n : graph.nodes()) {
    for (const Value* in : n->inputs) {
      if (in && !in->is_constant() && !defined.count(in)) {
        return absl::FailedPreconditionError("cannot export: " + n->Describe() + " reads '" +
                                             in->name + "', which is not defined before it");
      }
    }
    for (const Value* out : n->outputs) {
      if (out) defined.insert(out);
    }
  }
  for (const Value* out : graph.outputs) {
    if (!out->is_constant() && !defined.count(out)) {
      return absl::FailedPreconditionError("cannot export: graph output '" + out->name +
                                           "' is never defined");
    }
  }
  return absl::OkStatus();
}

// Constants referenced by a node or a graph output become initializers, in value order (the
// importer's order), so export -> import -> export is byte-stable.
// `external` (the top-level graph only) may take a constant's bytes: the initializer then
// names the location it returned instead of holding them.
void WriteInitializers(const Graph& graph, onnx::GraphProto* g,
                       const ExternalWriter* external = nullptr) {
  std::unordered_set<const Value*> used(graph.outputs.begin(), graph.outputs.end());
  for (const auto& n : graph.nodes()) used.insert(n->inputs.begin(), n->inputs.end());
  for (const auto& v : graph.values()) {
    if (!v->is_constant() || !used.count(v.get())) continue;
    const std::optional<std::string> location =
        external && *external ? (*external)(*v->constant) : std::nullopt;
    if (!location) {
      *g->add_initializer() = TensorToProto(*v->constant, v->name);
      continue;
    }
    onnx::TensorProto* p = g->add_initializer();
    p->set_name(v->name);
    p->set_data_type(static_cast<int32_t>(v->constant->dtype()));
    for (int64_t d : v->constant->shape()) p->add_dims(d);
    p->set_data_location(onnx::TensorProto::EXTERNAL);
    auto* loc = p->add_external_data();
    loc->set_key("location");
    loc->set_value(*location);
    auto* length = p->add_external_data();
    length->set_key("length");
    length->set_value(std::to_string(v->constant->nbytes()));
  }
}

// value_info for every typed intermediate, so Netron shows shapes and a re-import keeps them.
void WriteIntermediateInfo(const Graph& graph, onnx::GraphProto* g) {
  for (const auto& n : graph.nodes()) {
    for (const Value* out : n->outputs) {
      if (!out || graph.IsGraphOutput(out)) continue;
      if (out->dtype == DType::kUndefined && !out->shape) continue;
      WriteValueInfo(*out, g->add_value_info());
    }
  }
}

}  // namespace

namespace {

void WriteGraph(const Graph& graph, onnx::GraphProto* g, const ExternalWriter* external) {
  g->set_name(graph.name.empty() ? "kiln" : graph.name);
  for (const Value* in : graph.inputs) WriteValueInfo(*in, g->add_input());
  WriteInitializers(graph, g, external);
  for (const auto& n : graph.nodes()) WriteNode(*n, g->add_node());
  for (const Value* out : graph.outputs) WriteValueInfo(*out, g->add_output());
  WriteIntermediateInfo(graph, g);
}

}  // namespace

absl::StatusOr<onnx::ModelProto> ExportModel(const Graph& graph, const ExportOptions& options) {
  RETURN_IF_ERROR(CheckDefined(graph));
  onnx::ModelProto model;
  model.set_ir_version(kIrVersion);
  model.set_producer_name("kiln");
  model.set_producer_version("0.1.0");
  WriteOpsets(graph, model);
  WriteGraph(graph, model.mutable_graph(), &options.external);
  return model;
}

absl::Status ExportModelFile(const Graph& graph, const std::string& path) {
  ASSIGN_OR_RETURN(onnx::ModelProto model, ExportModel(graph));
  if (model.ByteSizeLong() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return absl::ResourceExhaustedError(
        "the model is larger than 2 GiB, the protobuf limit (external data is not written)");
  }
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f || !model.SerializeToOstream(&f)) {
    return absl::InternalError("cannot write " + path);
  }
  f.close();
  if (!f) return absl::InternalError("cannot write " + path);
  return absl::OkStatus();
}

}  // namespace kiln::onnx_io
