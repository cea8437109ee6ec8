#include "server/model/cache_mask_graph.h"

#include <utility>

namespace kiln::server::mask_graph {

Value* Op(Graph& g, const std::string& op, std::vector<Value*> in,
          std::map<std::string, Attribute> attrs) {
  Value* out = g.NewValue("kiln_mask_" + op);
  Node* n = g.AddNode(op, std::move(in), {out});
  n->attrs = std::move(attrs);
  return out;
}

Value* Ints(Graph& g, std::vector<int64_t> v) {
  const auto n = static_cast<int64_t>(v.size());
  return g.AddConstant("kiln_mask_ints", Tensor::FromInt64(v, {n}));
}

Value* CastTo(Graph& g, Value* x, DType to) {
  return Op(g, "Cast", {x}, {{"to", Attribute::Int(static_cast<int64_t>(to))}});
}

Value* Real(Graph& g, Value* mask) {
  Value* zero = g.AddConstant("kiln_mask_zero", Tensor::Scalar(DType::kFloat32, 0.0));
  Value* as_float = mask->dtype == DType::kFloat32 ? mask : CastTo(g, mask, DType::kFloat32);
  return CastTo(g, Op(g, "Not", {Op(g, "Equal", {as_float, zero})}), DType::kFloat32);
}

}  // namespace kiln::server::mask_graph
