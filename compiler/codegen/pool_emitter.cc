#include "compiler/codegen/pool_emitter.h"

#include <limits>

#include "compiler/codegen/shapes.h"
#include "ops/nn_window.h"

namespace kiln::codegen {
namespace {

std::string L(int64_t v) { return IntLiteral(v); }

// The window loops: kd, kh, kw over the kernel, input coordinates id, ih, iw; `pcnt` counts
// taps inside the explicitly padded input, `cnt` and the body run for taps inside the input.
void EmitWindow(SourceWriter& w, const ref::nn::Win3& g, const std::string& body) {
  const char* axis[3] = {"d", "h", "w"};
  for (int a = 0; a < 3; ++a) {
    const std::string k = std::string("k") + axis[a], i = std::string("i") + axis[a];
    w.Open("for (long long " + k + " = 0; " + k + " < " + L(g.k[a]) + "; ++" + k + ")");
    w.Line("const long long " + i + " = o" + axis[a] + " * " + L(g.s[a]) + " - " + L(g.pb[a]) + " + " +
           k + " * " + L(g.d[a]) + ";");
  }
  std::string padded = "true", inside = "true";
  for (int a = 0; a < 3; ++a) {
    const std::string i = std::string("i") + axis[a];
    padded += " && " + i + " >= -" + L(g.pb[a]) + " && " + i + " < " + L(g.in[a] + g.pe[a]);
    inside += " && " + i + " >= 0 && " + i + " < " + L(g.in[a]);
  }
  w.Line("pcnt += (" + padded + ") ? 1 : 0;");
  w.Line("if (!(" + inside + ")) continue;");
  w.Line("const float v = x[(id * " + L(g.in[1]) + " + ih) * " + L(g.in[2]) + " + iw];");
  w.Line("++cnt;");
  w.Line(body);
  for (int a = 0; a < 3; ++a) w.Close();
}

}  // namespace

bool IsPoolNode(const Node& node) {
  return node.domain.empty() && (node.op_type == "MaxPool" || node.op_type == "AveragePool");
}

absl::StatusOr<std::vector<Kernel>> EmitPool(const Node& node, const std::string& name) {
  if (!IsPoolNode(node) || !node.input(0) || !node.output(0)) {
    return absl::UnimplementedError("no pool kernel for " + node.Describe());
  }
  if (node.output(1)) return absl::UnimplementedError(node.Describe() + ": MaxPool Indices output");
  if (node.input(0)->dtype != DType::kFloat32) return absl::UnimplementedError(node.Describe() + ": dtype");
  ASSIGN_OR_RETURN(std::vector<int64_t> shape, StaticShapeOf(node.input(0)));
  if (shape.size() < 3) return absl::InvalidArgumentError(node.Describe() + ": rank < 3");
  const std::vector<int64_t> spatial(shape.begin() + 2, shape.end());
  ASSIGN_OR_RETURN(std::vector<int64_t> kernel, ref::nn::KernelShape(node, spatial.size(), nullptr));
  ASSIGN_OR_RETURN(ref::nn::Window win, ref::nn::ConvWindow(node, spatial, kernel));
  ASSIGN_OR_RETURN(ref::nn::Win3 g, ref::nn::To3D(node, win));
  const bool max = node.op_type == "MaxPool";
  const bool include_pad = node.GetInt("count_include_pad", 0) != 0;
  Kernel k;
  k.name = name;
  k.params = {{KernelParam::Kind::kInput, 0}, {KernelParam::Kind::kOutput, 0}};
  const int64_t total = shape[0] * shape[1] * g.out_size();
  k.grid = GridFor(total, k.block);
  SourceWriter w;
  w.Open(KernelSignature(k, {"float", "float"}));
  w.Open("for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < " + L(total) +
         "; i += (long long)blockDim.x * gridDim.x)");
  w.Line("long long r = i;");
  w.Line("const long long ow = r % " + L(g.out[2]) + "; r /= " + L(g.out[2]) + ";");
  w.Line("const long long oh = r % " + L(g.out[1]) + "; r /= " + L(g.out[1]) + ";");
  w.Line("const long long od = r % " + L(g.out[0]) + "; r /= " + L(g.out[0]) + ";");
  w.Line("const float* x = p0 + r * " + L(g.in_size()) + ";");
  w.Line(std::string("float acc = ") +
         (max ? "-" + FloatLiteral(std::numeric_limits<float>::infinity()) : "0.f") + ";");
  w.Line("long long cnt = 0, pcnt = 0;");
  EmitWindow(w, g, max ? "acc = kiln_max(acc, v);" : "acc += v;");
  w.Line("(void)cnt; (void)pcnt;");
  w.Line(max ? "p1[i] = acc;" : std::string("p1[i] = acc / (float)") + (include_pad ? "pcnt;" : "cnt;"));
  w.Close();
  w.Close();
  k.source = w.str();
  return std::vector<Kernel>{std::move(k)};
}

}  // namespace kiln::codegen
