// Pad and Tile: every output coordinate maps, dim by dim, to an input coordinate (or, for a
// constant Pad, to "outside", which stores the pad value).
#include <string>
#include <vector>

#include "compiler/codegen/movement_emitter.h"
#include "compiler/codegen/shapes.h"

namespace kiln::codegen {
namespace {

// The input coordinate `s` of output coordinate `c` along one dim, as C statements.
struct DimMap {
  int64_t before = 0;  // Pad: leading pad (may be negative: a crop)
  int64_t dim = 1;     // input size along the dim
};

std::string MapLine(const std::string& mode, const DimMap& m, const std::string& c) {
  const std::string d = std::to_string(m.dim);
  const std::string s = "s = " + c + " - (" + std::to_string(m.before) + "LL); ";
  if (mode == "tile") return "s = " + c + " % " + d + ";";
  if (mode == "edge") return s + "s = s < 0 ? 0 : (s >= " + d + " ? " + d + " - 1 : s);";
  if (mode == "wrap") return s + "s = ((s % " + d + ") + " + d + ") % " + d + ";";
  if (mode == "reflect") {
    // Reflection without repeating the edge, folded until inside (pads wider than the dim
    // reflect again); a dim of one reflects onto itself.
    if (m.dim == 1) return "s = 0;";
    return s + "while (s < 0 || s >= " + d + ") s = s < 0 ? -s : 2 * (" + d + " - 1) - s;";
  }
  return s + "ok = ok && s >= 0 && s < " + d + ";";  // constant
}

absl::StatusOr<std::string> PadValue(const Node& node, DType t, std::string& elem_type) {
  double v = 0.0;
  if (const Value* cv = node.input(2)) {
    if (!cv->is_constant() || cv->constant->numel() != 1) {
      return absl::UnimplementedError(node.Describe() + ": the pad value is not a constant scalar");
    }
    v = cv->constant->GetDouble(0);
  }
  if (!CType(t).empty()) {
    elem_type = CType(t);
    if (t == DType::kFloat32) return FloatLiteral(static_cast<float>(v));
    if (t == DType::kBool) return std::string(v != 0.0 ? "true" : "false");
    return "(" + elem_type + ")" + IntLiteral(static_cast<int64_t>(v));
  }
  if (v != 0.0) return absl::UnimplementedError("Pad value for " + DTypeName(t));
  return "(" + elem_type + ")0";
}

absl::StatusOr<std::vector<DimMap>> PadMaps(const Node& node, const std::vector<int64_t>& in) {
  ASSIGN_OR_RETURN(std::vector<int64_t> pads, ConstantInts(node, 1));
  ASSIGN_OR_RETURN(std::vector<int64_t> axes, ConstantInts(node, 3));
  const int64_t rank = static_cast<int64_t>(in.size());
  if (axes.empty()) {
    for (int64_t d = 0; d < rank; ++d) axes.push_back(d);
  }
  if (pads.size() != 2 * axes.size()) return absl::InvalidArgumentError(node.Describe() + ": pads length");
  std::vector<DimMap> maps(in.size());
  for (size_t d = 0; d < in.size(); ++d) maps[d].dim = in[d];
  for (size_t i = 0; i < axes.size(); ++i) {
    ASSIGN_OR_RETURN(int64_t a, NormalizedAxis(node, axes[i], rank));
    maps[a].before = pads[i];
  }
  return maps;
}

}  // namespace

absl::StatusOr<std::vector<Kernel>> EmitPadOrTile(const Node& node, const std::string& name) {
  ASSIGN_OR_RETURN(std::vector<int64_t> in, StaticShapeOf(node.input(0)));
  ASSIGN_OR_RETURN(std::vector<int64_t> out, StaticShapeOf(node.output(0)));
  const DType t = node.input(0)->dtype;
  std::string elem = WordType(DTypeSize(t));
  if (elem.empty() || IsNarrowDType(t) || in.size() != out.size()) {
    return absl::UnimplementedError(node.Describe() + ": element type or rank");
  }
  const bool tile = node.op_type == "Tile";
  const std::string mode = tile ? "tile" : node.GetString("mode", "constant");
  if (mode != "tile" && mode != "constant" && mode != "edge" && mode != "reflect" && mode != "wrap") {
    return absl::UnimplementedError("Pad mode " + mode);
  }
  std::vector<DimMap> maps(in.size());
  for (size_t d = 0; d < in.size(); ++d) maps[d].dim = in[d];
  if (!tile) {
    ASSIGN_OR_RETURN(maps, PadMaps(node, in));
  }
  std::string fill = "(" + elem + ")0";
  if (mode == "constant") {
    ASSIGN_OR_RETURN(fill, PadValue(node, t, elem));
  }
  for (const DimMap& m : maps) {
    if (m.dim == 0 && mode != "constant") return absl::InvalidArgumentError(node.Describe() + ": empty dim");
  }
  Kernel k;
  k.name = name;
  k.params = {{KernelParam::Kind::kInput, 0}, {KernelParam::Kind::kOutput, 0}};
  const int64_t total = NumElements(out);
  k.grid = GridFor(total, k.block);
  const std::vector<int64_t> st = RowMajorStrides(in);
  SourceWriter w;
  w.Open(KernelSignature(k, {elem, elem}));
  w.Open("for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < " +
         IntLiteral(total) + "; i += (long long)blockDim.x * gridDim.x)");
  w.Line("long long r = i, off = 0, s = 0;");
  w.Line("bool ok = true;");
  for (size_t d = out.size(); d-- > 0;) {
    const std::string c = "c" + std::to_string(d), n = IntLiteral(out[d]);
    w.Line("const long long " + c + " = r % " + n + "; r /= " + n + ";");
    w.Line(MapLine(mode, maps[d], c));
    w.Line("off += s * " + IntLiteral(st[d]) + ";");
  }
  w.Line("(void)ok;");
  w.Line("p1[i] = ok ? p0[off] : " + fill + ";");
  w.Close();
  w.Close();
  k.source = w.str();
  return std::vector<Kernel>{std::move(k)};
}

}  // namespace kiln::codegen
