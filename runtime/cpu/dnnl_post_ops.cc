#include "runtime/cpu/dnnl_post_ops.h"

namespace kiln::cpu {

bool AppendActivation(dnnl::post_ops& po, const kiln_ops::EpilogueStep& s) {
  using dnnl::algorithm;
  const std::string& op = s.op;
  if (op == "Relu") {
    po.append_eltwise(1.f, algorithm::eltwise_relu, 0.f, 0.f);
  } else if (op == "LeakyRelu") {
    po.append_eltwise(1.f, algorithm::eltwise_relu, s.alpha, 0.f);
  } else if (op == "Clip") {
    po.append_eltwise(1.f, algorithm::eltwise_clip_v2, s.alpha, s.beta);
  } else if (op == "Sigmoid") {
    po.append_eltwise(1.f, algorithm::eltwise_logistic, 0.f, 0.f);
  } else if (op == "HardSigmoid") {
    // 2.6 has no hardsigmoid: alpha*x+beta, then clamp to [0, 1].
    po.append_eltwise(1.f, algorithm::eltwise_linear, s.alpha, s.beta);
    po.append_eltwise(1.f, algorithm::eltwise_clip_v2, 0.f, 1.f);
  } else if (op == "HardSwish") {
    po.append_eltwise(1.f, algorithm::eltwise_hardswish, 0.f, 0.f);
  } else if (op == "Tanh") {
    po.append_eltwise(1.f, algorithm::eltwise_tanh, 0.f, 0.f);
  } else if (op == "Gelu") {
    po.append_eltwise(1.f, algorithm::eltwise_gelu_erf, 0.f, 0.f);
  } else if (op == "GeluTanh") {
    po.append_eltwise(1.f, algorithm::eltwise_gelu_tanh, 0.f, 0.f);
  } else if (op == "SiLU") {
    po.append_eltwise(1.f, algorithm::eltwise_swish, 1.f, 0.f);
  } else {
    return false;
  }
  return true;
}

bool PostOpKeepsNonFinite(const kiln_ops::EpilogueStep& s) {
  if (s.op == "LeakyRelu") return s.alpha != 0.f;
  return s.op == "Gelu" || s.op == "GeluTanh" || s.op == "SiLU" || s.op == "HardSwish" ||
         s.op == "Sigmoid" || s.op == "Tanh";
}

}  // namespace kiln::cpu
