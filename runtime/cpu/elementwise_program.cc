// Reading an element-wise node into the CPU kernel's instructions (elementwise_kernel.h).
#include <string>

#include "ir/kiln_ops.h"
#include "runtime/cpu/elementwise_kernel.h"
#include "runtime/cpu/quantize_math.h"

namespace kiln::cpu {
namespace {

using ew::Instr;
using ew::Op;

// A one-element constant input of `node` (a Q/DQ instruction's scale or zero point).
const Tensor* ScalarConstant(const Node& node, int64_t k) {
  if (k < 0 || k >= static_cast<int64_t>(node.inputs.size())) return nullptr;
  const Value* v = node.inputs[k];
  if (!v || !v->is_constant() || v->constant->numel() != 1 || v->constant->rank() > 1) {
    return nullptr;
  }
  return &*v->constant;
}

// A program's per-tensor DequantizeLinear or QuantizeLinear with constant float32 scale and
// (optional) 8/16-bit zero point, as an instruction reading operand 0 only; `qtype` is the
// type of the Q's output (the program's) and of the DQ's zero point. nullopt otherwise (the
// reference kernel then runs the program). The DQ's operand is checked by the caller.
std::optional<Instr> QuantInstr(const Node& node, const kiln_ops::Instruction& in, bool last,
                                DType program_dtype) {
  const bool quantize = in.op == "QuantizeLinear";
  if (in.operands.size() < 2 || in.operands.size() > 3 || (quantize && !last)) return std::nullopt;
  const Tensor* scale = ScalarConstant(node, in.operands[1]);
  const Tensor* zero = in.operands.size() > 2 ? ScalarConstant(node, in.operands[2]) : nullptr;
  if (!scale || scale->dtype() != DType::kFloat32 || (in.operands.size() > 2 && !zero)) {
    return std::nullopt;
  }
  auto attr = [&](const char* k) {
    auto it = in.attrs.find(k);
    return it == in.attrs.end() ? int64_t{0} : it->second.i;
  };
  const int64_t out_attr = attr("output_dtype");
  Instr i{quantize ? Op::kQuantize : Op::kDequantize,
          {static_cast<int>(in.operands[0])},
          scale->data<float>()[0],
          zero ? static_cast<float>(zero->GetDouble(0)) : 0.f};
  if (quantize) {
    const DType qt = zero            ? zero->dtype()
                     : out_attr != 0 ? static_cast<DType>(out_attr)
                                     : DType::kUInt8;
    if (qt != program_dtype || (out_attr != 0 && out_attr != static_cast<int64_t>(qt)) ||
        !qmath::Range(qt, &i.lo, &i.hi)) {
      return std::nullopt;
    }
    const int64_t prec = attr("precision");
    if (prec != 0 && prec != static_cast<int64_t>(DType::kFloat32)) return std::nullopt;
  } else {
    // The data's type (when it is an input; the caller refuses anything else) is the zero
    // point's, as the reference requires.
    const int64_t x = in.operands[0];
    const Value* xv = x < static_cast<int64_t>(node.inputs.size()) ? node.inputs[x] : nullptr;
    float lo, hi;
    if ((zero && !qmath::Range(zero->dtype(), &lo, &hi)) ||
        (zero && xv && xv->dtype != zero->dtype()) ||
        (out_attr != 0 && out_attr != static_cast<int64_t>(DType::kFloat32))) {
      return std::nullopt;
    }
  }
  return i;
}

}  // namespace

std::optional<std::vector<Instr>> ReadInstrs(const Node& node) {
  std::vector<Instr> prog;
  if (node.domain == kKilnDomain && node.op_type == kiln_ops::kFusedElementwise) {
    absl::StatusOr<kiln_ops::Program> p = kiln_ops::ReadProgram(node);
    if (!p.ok() || p->instructions.empty()) return std::nullopt;
    // A float program, or one whose last instruction quantizes it.
    if (p->dtype != DType::kFloat32 && p->instructions.back().op != "QuantizeLinear") {
      return std::nullopt;
    }
    for (size_t j = 0; j < p->instructions.size(); ++j) {
      const kiln_ops::Instruction& in = p->instructions[j];
      // Their scale, zero point and converted operand are looked up as inputs, which a
      // concatenation shifts (fuse_concat_elementwise never fuses such programs).
      const bool converts =
          in.op == "QuantizeLinear" || in.op == "DequantizeLinear" || in.op == "Cast";
      if (converts && kiln_ops::ConcatInputs(node) != 0) return std::nullopt;
      if (in.op == "QuantizeLinear" || in.op == "DequantizeLinear") {
        std::optional<Instr> q = QuantInstr(node, in, j + 1 == p->instructions.size(), p->dtype);
        if (!q) return std::nullopt;
        prog.push_back(std::move(*q));
        continue;
      }
      if (in.op == "Cast") {  // to float only; the operand is converted when loaded
        auto to = in.attrs.find("to");
        if (to == in.attrs.end() || to->second.i != 1 || in.operands.size() != 1)
          return std::nullopt;
        prog.push_back(Instr{Op::kCast, {static_cast<int>(in.operands[0])}, 0.f, 0.f});
        continue;
      }
      auto f = [&](const char* k, float dflt) {
        auto it = in.attrs.find(k);
        return it == in.attrs.end() ? dflt : it->second.f;
      };
      auto str = [&](const char* k, const char* dflt) {
        auto it = in.attrs.find(k);
        return it == in.attrs.end() ? std::string(dflt) : it->second.s;
      };
      std::optional<Instr> i = ew::MakeInstr(in.op, in.operands.size(), f, str);
      if (!i) return std::nullopt;
      for (int64_t k : in.operands) i->args.push_back(static_cast<int>(k));
      prog.push_back(std::move(*i));
    }
    return prog;
  }
  if (!node.domain.empty() || node.outputs.size() != 1) return std::nullopt;
  if (node.op_type == "Clip" && node.opset < 11) return std::nullopt;  // bounds were attributes
  std::optional<Instr> i = ew::MakeInstr(
      node.op_type, node.inputs.size(), [&](const char* k, float d) { return node.GetFloat(k, d); },
      [&](const char* k, const char* d) { return node.GetString(k, d); });
  if (!i) return std::nullopt;
  for (size_t k = 0; k < node.inputs.size(); ++k) {
    if (!node.inputs[k]) return std::nullopt;  // an omitted Clip bound
    i->args.push_back(static_cast<int>(k));
  }
  prog.push_back(std::move(*i));
  return prog;
}

bool OnlyConvertingReads(const std::vector<Instr>& prog, int k) {
  for (const Instr& i : prog) {
    for (int a : i.args) {
      if (a == k && i.op != Op::kCast && i.op != Op::kDequantize) return false;
    }
  }
  return true;
}

bool ReadsOperand(const std::vector<Instr>& prog, int k) {
  for (const Instr& i : prog) {
    for (int a : i.args) {
      if (a == k) return true;
    }
  }
  return false;
}

}  // namespace kiln::cpu
