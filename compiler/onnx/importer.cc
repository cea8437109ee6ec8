#include "compiler/onnx/importer.h"

#include <algorithm>
#include <filesystem>
#include <set>
#include <unordered_set>

#include "base/file.h"
#include "compiler/onnx/normalize.h"
#include "compiler/onnx/raw_slices.h"
#include "compiler/onnx/tensor_proto.h"

namespace kiln::onnx_io {
namespace {

// raw_data from this size on is copied straight from the model's bytes (raw_slices.h); below
// it, protobuf's copy costs less than the bookkeeping.
constexpr size_t kRawSliceMinBytes = size_t{64} << 10;

std::string NodeLabel(const onnx::NodeProto& n) { return n.op_type() + " '" + n.name() + "'"; }

absl::StatusOr<Attribute> ConvertAttribute(const onnx::NodeProto& node,
                                           const onnx::AttributeProto& a,
                                           const TensorReadOptions& topts) {
  if (!a.ref_attr_name().empty()) {
    return absl::UnimplementedError(NodeLabel(node) + ": attribute references are not supported");
  }
  switch (a.type()) {
    case onnx::AttributeProto::INT:
      return Attribute::Int(a.i());
    case onnx::AttributeProto::FLOAT:
      return Attribute::Float(a.f());
    case onnx::AttributeProto::STRING:
      return Attribute::String(a.s());
    case onnx::AttributeProto::INTS:
      return Attribute::Ints(std::vector<int64_t>(a.ints().begin(), a.ints().end()));
    case onnx::AttributeProto::FLOATS:
      return Attribute::Floats(std::vector<float>(a.floats().begin(), a.floats().end()));
    case onnx::AttributeProto::STRINGS:
      return Attribute::Strings(std::vector<std::string>(a.strings().begin(), a.strings().end()));
    case onnx::AttributeProto::TENSOR: {
      ASSIGN_OR_RETURN(Tensor t, TensorFromProto(a.t(), topts));
      return Attribute::TensorValue(std::move(t));
    }
    default:
      return absl::UnimplementedError(NodeLabel(node) + ": attribute '" + a.name() + "' of type " +
                                      onnx::AttributeProto::AttributeType_Name(a.type()) +
                                      " (subgraphs, sparse tensors, types) is not supported");
  }
}

// ONNX's operators take a few attributes each (the most, in ai.onnx.ml, about twenty). A node
// with a million costs every later copy of the graph (the reference, each bucket's compile,
// the engine cache's export) a million map entries: 2 GB and 18 s for an 18 MB model.
constexpr size_t kMaxAttributesPerNode = 256;

absl::Status CheckAttributeCount(const std::string& op_type, const std::string& name,
                                 size_t count) {
  if (count <= kMaxAttributesPerNode) return absl::OkStatus();
  return absl::InvalidArgumentError(op_type + " '" + name + "' has " + std::to_string(count) +
                                    " attributes; at most " +
                                    std::to_string(kMaxAttributesPerNode) + " are allowed");
}

absl::Status CheckAttributeCount(const onnx::NodeProto& node) {
  return CheckAttributeCount(node.op_type(), node.name(),
                             static_cast<size_t>(node.attribute_size()));
}

absl::StatusOr<Shape> ConvertShape(const std::string& name, const onnx::TensorShapeProto& s) {
  Shape shape;
  for (const auto& d : s.dim()) {
    if (d.has_dim_value()) {
      if (d.dim_value() < 0) {
        return absl::InvalidArgumentError("value '" + name + "' declares negative dim " +
                                          std::to_string(d.dim_value()));
      }
      shape.push_back(Dim(d.dim_value()));
    } else {
      shape.push_back(Dim::Symbol(d.dim_param()));
    }
  }
  return shape;
}

absl::Status ApplyValueInfo(const onnx::ValueInfoProto& info, Value* v) {
  if (!info.has_type()) return absl::OkStatus();
  if (!info.type().has_tensor_type()) {
    return absl::UnimplementedError("value '" + info.name() +
                                    "' is not a tensor (sequences, maps and optionals are not "
                                    "supported)");
  }
  const auto& tt = info.type().tensor_type();
  if (tt.has_elem_type() && tt.elem_type() != 0) {  // 0: UNDEFINED, i.e. not stated
    RETURN_IF_ERROR(CheckElemType(tt.elem_type(), "value '" + info.name() + "'"));
    v->dtype = static_cast<DType>(tt.elem_type());
  }
  if (tt.has_shape()) {
    ASSIGN_OR_RETURN(Shape s, ConvertShape(info.name(), tt.shape()));
    v->shape = std::move(s);
  }
  return absl::OkStatus();
}

// Turns a Constant node's attribute into a tensor.
absl::StatusOr<Tensor> ConstantValue(const onnx::NodeProto& node, const TensorReadOptions& topts) {
  if (node.attribute_size() != 1) {
    return absl::InvalidArgumentError(NodeLabel(node) + ": Constant needs exactly one attribute");
  }
  const auto& a = node.attribute(0);
  const std::string& k = a.name();
  if (k == "value") return TensorFromProto(a.t(), topts);
  if (k == "value_float") return Tensor::Scalar(DType::kFloat32, a.f());
  if (k == "value_int") return Tensor::FromInt64({a.i()}, {});
  if (k == "value_floats") {
    std::vector<float> v(a.floats().begin(), a.floats().end());
    return Tensor::FromFloat(v, {static_cast<int64_t>(v.size())});
  }
  if (k == "value_ints") {
    std::vector<int64_t> v(a.ints().begin(), a.ints().end());
    return Tensor::FromInt64(v, {static_cast<int64_t>(v.size())});
  }
  return absl::UnimplementedError(NodeLabel(node) + ": Constant attribute '" + k +
                                  "' (strings, sparse tensors) is not supported");
}

bool IsTopologicallySorted(const Graph& g) {
  std::unordered_set<const Node*> seen;
  for (const auto& n : g.nodes()) {
    for (const Value* in : n->inputs) {
      if (in && in->producer && !seen.count(in->producer)) return false;
    }
    seen.insert(n.get());
  }
  return true;
}

// Imports one graph: the model's, or (with a parent) a control-flow body, whose reads of
// names it does not define are captures of an enclosing graph (Graph::captures; the owning
// node gets the outer values as trailing inputs, Node::captures).
class GraphImporter {
 public:
  GraphImporter(const onnx::ModelProto& model, const ImportOptions& options)
      : model_(&model), proto_(model.graph()), options_(options) {
    topts_.base_dir = options.model_dir;
    topts_.max_bytes = options.max_tensor_bytes;
    topts_.external_scheme = options.external_scheme;
    topts_.external = options.external;
  }
  GraphImporter(const onnx::GraphProto& body, GraphImporter& parent)
      : proto_(body), options_(parent.options_), topts_(parent.topts_), parent_(&parent) {}

  absl::StatusOr<std::unique_ptr<Graph>> Run() {
    graph_ = std::make_unique<Graph>();
    const auto& g = proto_;
    graph_->name = g.name();
    if (parent_) {
      graph_->opsets = parent_->graph_->opsets;
    } else {
      RETURN_IF_ERROR(ImportOpsets());
    }
    RETURN_IF_ERROR(ImportInitializers());
    RETURN_IF_ERROR(ImportInputs());
    RETURN_IF_ERROR(ImportNodes());
    RETURN_IF_ERROR(ImportOutputs());
    // Sorting only when needed keeps a sorted file's node order (exports round-trip exactly).
    if (!IsTopologicallySorted(*graph_) && !graph_->TopologicalSort()) {
      return absl::InvalidArgumentError("the graph has a cycle");
    }
    return std::move(graph_);
  }

 private:
  absl::Status ImportOpsets() {
    for (const auto& op : model_->opset_import()) {
      std::string domain = op.domain() == "ai.onnx" ? "" : op.domain();
      graph_->opsets[domain] = op.version();
    }
    if (!graph_->opsets.count("")) {
      // IR versions before 3 had no opset_import; ONNX treats that as opset 1.
      graph_->opsets[""] = model_->opset_import_size() == 0 ? 1 : 0;
    }
    return absl::OkStatus();
  }

  absl::Status ImportInitializers() {
    const auto& g = proto_;
    if (g.sparse_initializer_size() > 0) {
      return absl::UnimplementedError("sparse initializers are not supported");
    }
    for (const auto& init : g.initializer()) {
      if (init.name().empty()) return absl::InvalidArgumentError("an initializer has no name");
      Value* v = graph_->AddValue(init.name());
      if (!v) return absl::InvalidArgumentError("duplicate initializer '" + init.name() + "'");
      ASSIGN_OR_RETURN(Tensor t, TensorFromProto(init, topts_));
      v->dtype = t.dtype();
      v->shape = ToShape(t.shape());
      v->constant = std::move(t);
    }
    return absl::OkStatus();
  }

  absl::Status ImportInputs() {
    for (const auto& in : proto_.input()) {
      if (Value* existing = graph_->FindValue(in.name())) {
        if (existing->is_constant()) continue;  // shadowed by an initializer: a constant
        return absl::InvalidArgumentError("duplicate graph input '" + in.name() + "'");
      }
      if (in.name().empty()) return absl::InvalidArgumentError("a graph input has no name");
      Value* v = graph_->AddValue(in.name());
      RETURN_IF_ERROR(ApplyValueInfo(in, v));
      // A body's inputs may leave their types to the node that runs it.
      if (v->dtype == DType::kUndefined && !parent_) {
        return absl::InvalidArgumentError("graph input '" + in.name() + "' has no element type");
      }
      graph_->inputs.push_back(v);
    }
    return absl::OkStatus();
  }

  absl::StatusOr<Value*> LookupInput(const onnx::NodeProto& node, const std::string& name) {
    if (name.empty()) return nullptr;  // omitted optional input
    Value* v = graph_->FindValue(name);
    if (!v && Capture(name)) v = graph_->FindValue(name);
    if (!v) {
      // Defined later by another node (unsorted model): create now, check definition below.
      v = graph_->AddValue(name);
      pending_.insert(name);
    }
    (void)node;
    return v;
  }

  absl::Status DefineOutput(const onnx::NodeProto& node, const std::string& name, Value** out) {
    if (name.empty()) {
      *out = nullptr;
      return absl::OkStatus();
    }
    Value* v = graph_->FindValue(name);
    if (v && pending_.erase(name)) {
      *out = v;
      return absl::OkStatus();
    }
    if (v) {
      return absl::InvalidArgumentError(NodeLabel(node) + ": output '" + name +
                                        "' is already defined (the graph is not in SSA form)");
    }
    *out = graph_->AddValue(name);
    return absl::OkStatus();
  }

  // Whether `name` is readable here: defined in this graph, or (in a body) captured from an
  // enclosing graph, which then captures it in turn if it does not define it either.
  bool Capture(const std::string& name) {
    if (graph_->FindValue(name)) return !pending_.count(name);
    if (!parent_ || !parent_->Capture(name)) return false;
    Value* v = graph_->AddValue(name);
    const Value* outer = parent_->graph_->FindValue(name);
    v->dtype = outer->dtype;
    v->shape = outer->shape;
    graph_->captures.push_back(v);
    return true;
  }

  // A GRAPH attribute: the body, imported with this graph as its enclosing scope.
  absl::StatusOr<Attribute> ImportBody(const onnx::NodeProto& np, const onnx::AttributeProto& a) {
    if (++depth_guard_ > 64) return absl::InvalidArgumentError(NodeLabel(np) + ": bodies nest too deep");
    GraphImporter body(a.g(), *this);
    body.depth_guard_ = depth_guard_;
    ASSIGN_OR_RETURN(std::unique_ptr<Graph> g, body.Run());
    --depth_guard_;
    // A body's ops get the same one-form-per-op normalization as the graph's (a body frozen
    // after import is never normalized later).
    if (options_.normalize) RETURN_IF_ERROR(NormalizeOperators(*g));
    return Attribute::GraphValue(std::shared_ptr<const Graph>(std::move(g)));
  }

  // The node's captures: every name its bodies read from this scope, once, sorted (an order
  // that does not depend on the order of the bodies' nodes, so export and import agree),
  // appended to its inputs.
  absl::Status AddCaptures(Node& node) {
    std::set<std::string> names;
    for (const auto& [key, attr] : node.attrs) {
      (void)key;
      if (attr.kind != Attribute::Kind::kGraph) continue;
      for (const Value* c : attr.g->captures) names.insert(c->name);
    }
    for (const std::string& name : names) {
      Value* outer = graph_->FindValue(name);
      if (!outer) return absl::InternalError("capture '" + name + "' is not in scope");
      node.captures.push_back(name);
      node.inputs.push_back(outer);
    }
    return absl::OkStatus();
  }

  absl::Status ImportNode(const onnx::NodeProto& np) {
    std::string domain = np.domain() == "ai.onnx" ? "" : np.domain();
    if (np.op_type() == "Constant" && domain.empty()) {
      if (np.output_size() != 1 || np.output(0).empty()) {
        return absl::InvalidArgumentError(NodeLabel(np) + ": Constant needs one output");
      }
      ASSIGN_OR_RETURN(Tensor t, ConstantValue(np, topts_));
      Value* v = nullptr;
      RETURN_IF_ERROR(DefineOutput(np, np.output(0), &v));
      v->dtype = t.dtype();
      v->shape = ToShape(t.shape());
      v->constant = std::move(t);
      return absl::OkStatus();
    }
    auto node = std::make_unique<Node>();
    node->name = np.name().empty() ? np.op_type() + "_" + std::to_string(node_count_) : np.name();
    node->op_type = np.op_type();
    node->domain = domain;
    auto it = graph_->opsets.find(domain);
    node->opset = it == graph_->opsets.end() ? 0 : it->second;
    RETURN_IF_ERROR(CheckAttributeCount(np));
    for (const auto& a : np.attribute()) {
      Attribute attr;
      if (a.type() == onnx::AttributeProto::GRAPH && a.ref_attr_name().empty()) {
        ASSIGN_OR_RETURN(attr, ImportBody(np, a));
      } else {
        ASSIGN_OR_RETURN(attr, ConvertAttribute(np, a, topts_));
      }
      // A second value under one name would silently replace the first (ONNX forbids it).
      if (!node->attrs.emplace(a.name(), std::move(attr)).second) {
        return absl::InvalidArgumentError(NodeLabel(np) + ": attribute '" + a.name() +
                                          "' appears twice");
      }
    }
    for (const auto& in : np.input()) {
      ASSIGN_OR_RETURN(Value * v, LookupInput(np, in));
      node->inputs.push_back(v);
    }
    RETURN_IF_ERROR(AddCaptures(*node));
    for (const auto& out : np.output()) {
      Value* v = nullptr;
      RETURN_IF_ERROR(DefineOutput(np, out, &v));
      node->outputs.push_back(v);
    }
    graph_->InsertNode(nullptr, std::move(node));
    return absl::OkStatus();
  }

  absl::Status ImportNodes() {
    for (const auto& np : proto_.node()) {
      ++node_count_;
      RETURN_IF_ERROR(ImportNode(np));
    }
    if (!pending_.empty()) {
      return absl::InvalidArgumentError("value '" + *pending_.begin() +
                                        "' is used but never defined");
    }
    for (const auto& info : proto_.value_info()) {
      Value* v = graph_->FindValue(info.name());
      if (v && !v->is_constant() && v->producer) {
        absl::Status st = ApplyValueInfo(info, v);
        if (!st.ok()) return st;
      }
    }
    return absl::OkStatus();
  }

  absl::Status ImportOutputs() {
    const auto& g = proto_;
    if (g.output_size() == 0) return absl::InvalidArgumentError("the graph has no outputs");
    for (const auto& out : g.output()) {
      Value* v = graph_->FindValue(out.name());
      if (!v && Capture(out.name())) v = graph_->FindValue(out.name());  // a body passing one on
      if (!v) {
        return absl::InvalidArgumentError("graph output '" + out.name() + "' is never defined");
      }
      // Declared output types are checked against inference later, not trusted now; keep
      // them only where nothing else says.
      if (v->dtype == DType::kUndefined || !v->shape) {
        Value probe;
        RETURN_IF_ERROR(ApplyValueInfo(out, &probe));
        if (v->dtype == DType::kUndefined) v->dtype = probe.dtype;
        if (!v->shape) v->shape = probe.shape;
      }
      // Outputs are returned by name; two with one name would make one of them vanish.
      if (graph_->IsGraphOutput(v)) {
        return absl::InvalidArgumentError("graph output '" + out.name() + "' is listed twice");
      }
      graph_->outputs.push_back(v);
    }
    return absl::OkStatus();
  }

  const onnx::ModelProto* model_ = nullptr;  // the top-level graph's model
  const onnx::GraphProto& proto_;
  const ImportOptions& options_;
  TensorReadOptions topts_;
  GraphImporter* parent_ = nullptr;  // set for a body
  int depth_guard_ = 0;
  std::unique_ptr<Graph> graph_;
  std::unordered_set<std::string> pending_;
  int64_t node_count_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Graph>> ImportModel(const onnx::ModelProto& model,
                                                   const ImportOptions& options) {
  if (!model.has_graph()) return absl::InvalidArgumentError("the model has no graph");
  GraphImporter importer(model, options);
  ASSIGN_OR_RETURN(std::unique_ptr<Graph> graph, importer.Run());
  if (options.normalize) RETURN_IF_ERROR(NormalizeOperators(*graph));
  return graph;
}

absl::StatusOr<std::unique_ptr<Graph>> ImportModelBytes(std::string_view bytes,
                                                        const ImportOptions& options) {
  // Before the parse, which would build every attribute's message (ImportNode checks again
  // what this walk cannot see: a model it stops early on).
  const WidestNode widest = FindWidestNode(bytes);
  RETURN_IF_ERROR(CheckAttributeCount(widest.op_type, widest.name, widest.attributes));
  // Large raw_data is copied once, from `bytes` (raw_slices.h). Not where the caller brings
  // its own external store (the engine cache's graphs, whose weights are there already).
  if (!options.external) {
    if (std::optional<SplitModel> split = SplitRawData(bytes, kRawSliceMinBytes)) {
      onnx::ModelProto model;
      if (split->bytes.size() <= static_cast<size_t>(std::numeric_limits<int>::max()) &&
          model.ParseFromString(split->bytes)) {
        ImportOptions from_bytes = options;
        from_bytes.external_scheme = kRawSliceScheme;
        from_bytes.external = [&](const std::string& location, DType dtype,
                                  const std::vector<int64_t>& dims) -> absl::StatusOr<Tensor> {
          // Only the places the split took: a location a model wrote itself is not trusted.
          const auto slice = ParseRawSlice(location);
          if (!slice || !split->slices.count(*slice)) {
            return absl::InvalidArgumentError("external data location '" + location +
                                              "' is reserved");
          }
          return TensorFromStored(bytes.substr(slice->first, slice->second), dtype, dims);
        };
        return ImportModel(model, from_bytes);
      }
    }
  }
  onnx::ModelProto model;
  if (bytes.size() > static_cast<size_t>(std::numeric_limits<int>::max()) ||
      !model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return absl::InvalidArgumentError("not a valid ONNX model (protobuf parse failed)");
  }
  return ImportModel(model, options);
}

absl::StatusOr<std::unique_ptr<Graph>> ImportModelFile(const std::string& path) {
  std::optional<std::string> bytes = ReadWholeFile(path);
  if (!bytes) return absl::NotFoundError("cannot open model " + path);
  ImportOptions options;
  options.model_dir = std::filesystem::path(path).parent_path().string();
  if (options.model_dir.empty()) options.model_dir = ".";
  return ImportModelBytes(*bytes, options);
}

}  // namespace kiln::onnx_io
