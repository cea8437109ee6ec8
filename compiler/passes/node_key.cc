#include "compiler/passes/node_key.h"

#include <sstream>

namespace kiln::passes {

std::string TensorKey(const Tensor& t) {
  std::string k = std::to_string(static_cast<int>(t.dtype())) + ShapeToString(t.shape());
  k.append(static_cast<const char*>(t.raw()), t.nbytes());
  return k;
}

std::string AttrKey(const Attribute& a) {
  std::ostringstream os;
  os.precision(17);
  os << static_cast<int>(a.kind) << ':';
  switch (a.kind) {
    case Attribute::Kind::kInt: os << a.i; break;
    case Attribute::Kind::kFloat: os << a.f; break;
    case Attribute::Kind::kString: os << a.s.size() << a.s; break;
    case Attribute::Kind::kTensor: os << TensorKey(a.t); break;
    case Attribute::Kind::kInts: for (int64_t v : a.ints) os << v << ','; break;
    case Attribute::Kind::kFloats: for (float v : a.floats) os << v << ','; break;
    case Attribute::Kind::kStrings:
      for (const auto& s : a.strings) os << s.size() << s;
      break;
    case Attribute::Kind::kGraph: os << static_cast<const void*>(a.g.get()); break;  // identity
  }
  return os.str();
}

std::string OpAndAttrsKey(const Node& n) {
  std::string k = n.domain + '|' + n.op_type + '|';
  for (const auto& [name, a] : n.attrs) k += name + '=' + AttrKey(a) + ';';
  return k;
}

}  // namespace kiln::passes
