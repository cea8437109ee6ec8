#include "ir/verifier.h"

#include "absl/container/flat_hash_set.h"

namespace kiln {
namespace {

absl::Status Fail(const std::string& what) {
  return absl::InternalError("IR verification failed: " + what);
}

absl::Status CheckConstant(const Value& v) {
  if (v.constant->dtype() != v.dtype) {
    return Fail("constant '" + v.name + "' holds " + DTypeName(v.constant->dtype()) +
                " but is typed " + DTypeName(v.dtype));
  }
  if (v.shape && (!IsStatic(*v.shape) || StaticDims(*v.shape) != v.constant->shape())) {
    return Fail("constant '" + v.name + "' has shape " + ShapeToString(v.constant->shape()) +
                " but is declared " + ShapeToString(*v.shape));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status VerifyGraph(const Graph& graph) {
  // Flat sets sized up front: the verifier runs after every pass, and node-based sets growing
  // to every value of a 200k-node graph were most of its compile time (a malloc per value,
  // ~20 rehashes).
  absl::flat_hash_set<const Value*> defined;
  absl::flat_hash_set<const Value*> all;
  defined.reserve(graph.values().size());
  all.reserve(graph.values().size());
  for (const auto& v : graph.values()) all.insert(v.get());
  for (const auto& v : graph.values()) {
    if (v->constant) {
      RETURN_IF_ERROR(CheckConstant(*v));
      if (v->producer) return Fail("constant '" + v->name + "' also has a producer");
      defined.insert(v.get());
    }
  }
  for (const Value* in : graph.inputs) {
    if (!all.count(in)) return Fail("graph input not owned by the graph");
    if (in->producer) return Fail("graph input '" + in->name + "' has a producer");
    defined.insert(in);
  }
  for (const auto& n : graph.nodes()) {
    for (const Value* in : n->inputs) {
      if (!in) continue;
      if (!all.count(in)) return Fail(n->Describe() + " reads a value the graph does not own");
      if (!defined.count(in)) {
        return Fail(n->Describe() + " reads '" + in->name +
                    "' before it is defined (or it is never defined)");
      }
    }
    for (const Value* out : n->outputs) {
      if (!out) continue;
      if (!all.count(out)) return Fail(n->Describe() + " writes a value the graph does not own");
      if (out->producer != n.get()) {
        return Fail("'" + out->name + "' does not name " + n->Describe() + " as its producer");
      }
      if (defined.count(out)) return Fail("'" + out->name + "' is defined twice (not SSA)");
      defined.insert(out);
    }
  }
  for (const Value* out : graph.outputs) {
    if (!defined.count(out)) return Fail("graph output '" + out->name + "' is never defined");
  }
  return absl::OkStatus();
}

}  // namespace kiln
