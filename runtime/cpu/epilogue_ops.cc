#include "runtime/cpu/epilogue_ops.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

namespace kiln::cpu {

std::optional<EpilogueActivation> MakeEpilogueActivation(const kiln_ops::EpilogueStep& e) {
  EpilogueActivation a;
  if (e.op == "Clip") {
    a.clip = true;
    a.lo = e.alpha;
    a.hi = e.beta;
    return a;
  }
  if (e.op == "Add") return std::nullopt;
  // Epilogue steps carry their parameters as alpha/beta; GeluTanh is Gelu(approximate=tanh).
  const std::string name = e.op == "GeluTanh" ? "Gelu" : e.op;
  auto f = [&](const char* attr, float def) {
    const std::string key = attr;
    return key == "alpha" ? e.alpha : key == "beta" ? e.beta : def;
  };
  auto str = [&](const char*, const char* def) {
    return std::string(e.op == "GeluTanh" ? "tanh" : def);
  };
  std::optional<ew::Instr> ins = ew::MakeInstr(name, 1, f, str);
  if (!ins) return std::nullopt;
  a.instr = *ins;
  return a;
}

void ApplyActivation(const EpilogueActivation& a, float* y, int64_t n) {
  if (!a.clip) {
    ew::Unary(a.instr, y, y, n);
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    const float v = y[i];
    y[i] = v < a.lo ? a.lo : (v > a.hi ? a.hi : v);  // NaN passes
  }
}

float ActivationBound(const kiln_ops::EpilogueStep& s, float b) {
  const std::string& op = s.op;
  if (op == "Relu" || op == "Gelu" || op == "GeluTanh" || op == "SiLU" || op == "HardSwish") {
    return b;  // |act(v)| <= |v|
  }
  if (op == "LeakyRelu") return b * std::max(1.f, std::fabs(s.alpha));
  if (op == "Sigmoid" || op == "Tanh" || op == "HardSigmoid") return 1.f;
  if (op == "Clip") return std::max({std::fabs(s.alpha), std::fabs(s.beta)});
  return std::numeric_limits<float>::infinity();
}

}  // namespace kiln::cpu
