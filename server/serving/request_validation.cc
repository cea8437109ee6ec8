#include "server/serving/request_validation.h"

#include <algorithm>
#include <limits>
#include <optional>

#include "absl/strings/str_join.h"
#include "compiler/shape/dim_expr.h"
#include "server/common/echo.h"
#include "server/serving/kserve_tensor.h"
#include "server/serving/tensor_codec.h"

namespace kiln::server {
namespace {

// How messages name dtypes: ONNX's names for kiln.v1 (its enum follows ONNX), the v2
// protocol's for v2 clients.
enum class Naming { kOnnx, kKServe };

std::string TypeName(DType t, Naming naming) {
  if (naming == Naming::kKServe && !kserve::DataTypeName(t).empty()) {
    return std::string(kserve::DataTypeName(t));
  }
  return DTypeName(t);
}

// `symbols`: the input's dynamic dims (ModelSignature::dim_symbols), named instead of "batch".
std::string SpecText(const runtime::TensorSpec& s, Naming naming = Naming::kOnnx,
                     const std::vector<std::string>* symbols = nullptr) {
  std::vector<std::string> dims;
  for (size_t i = 0; i < s.shape.size(); ++i) {
    const bool named = symbols && i < symbols->size() && !(*symbols)[i].empty();
    dims.push_back(named ? (*symbols)[i] : s.shape[i] < 0 ? "batch" : std::to_string(s.shape[i]));
  }
  return absl::StrCat(TypeName(s.dtype, naming), "[", absl::StrJoin(dims, ","), "]");
}

std::vector<std::string> InputNames(const ModelSignature& sig) {
  std::vector<std::string> names;
  for (const auto& s : sig.inputs) names.push_back(s.name);
  return names;
}

// Checks a tensor's dtype and shape against its spec; `rows` is the batch size seen so far
// (-1 none).
absl::Status CheckAgainstSpec(const ModelSignature& sig, const runtime::TensorSpec& spec,
                              DType dtype, const std::vector<int64_t>& shape, int64_t& rows,
                              Naming naming = Naming::kOnnx) {
  const std::string what = absl::StrCat("input '", spec.name, "'");
  if (dtype != spec.dtype) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, naming == Naming::kOnnx ? ": dtype " : ": datatype ",
                     TypeName(dtype, naming), ", the model takes ", SpecText(spec, naming)));
  }
  bool match = shape.size() == spec.shape.size();
  for (size_t i = 0; match && i < spec.shape.size(); ++i) {
    match = spec.shape[i] < 0 ? shape[i] >= 1 : shape[i] == spec.shape[i];
  }
  if (!match) {
    const size_t k = static_cast<size_t>(&spec - sig.inputs.data());
    const auto* symbols = k < sig.dim_symbols.size() ? &sig.dim_symbols[k] : nullptr;
    return absl::InvalidArgumentError(absl::StrCat(what, ": shape ", ShapeToString(shape),
                                                   ", the model takes ",
                                                   SpecText(spec, naming, symbols)));
  }
  if (!sig.batchable) return absl::OkStatus();
  if (shape[0] > sig.max_batch_size) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": batch of ", shape[0],
                                                   " exceeds max_batch_size ", sig.max_batch_size));
  }
  if (rows >= 0 && shape[0] != rows) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": batch dim ", shape[0], " differs from the other inputs' ", rows));
  }
  rows = shape[0];
  return absl::OkStatus();
}

absl::Status CheckAgainstSpec(const ModelSignature& sig, const runtime::TensorSpec& spec,
                              const Tensor& t, int64_t& rows, Naming naming = Naming::kOnnx) {
  return CheckAgainstSpec(sig, spec, t.dtype(), t.shape(), rows, naming);
}

absl::Status UnknownInput(const ModelSignature& sig, const std::string& name) {
  return absl::InvalidArgumentError(
      absl::StrCat("unknown input '", EchoName(name),
                   "'; the model takes: ", absl::StrJoin(InputNames(sig), ", ")));
}

std::vector<std::string> OutputNames(const ModelSignature& sig) {
  std::vector<std::string> names;
  for (const auto& s : sig.outputs) names.push_back(s.name);
  return names;
}

}  // namespace

namespace {

// Every dim written as an expression of the symbols ("past + 1") must have its value.
absl::Status CheckDerivedDims(const ModelSignature& sig, const std::vector<Tensor>& inputs,
                              const std::map<std::string, int64_t>& values) {
  for (size_t k = 0; k < sig.dim_symbols.size() && k < inputs.size(); ++k) {
    for (size_t i = 0; i < sig.dim_symbols[k].size() && i < inputs[k].shape().size(); ++i) {
      const std::string& expr = sig.dim_symbols[k][i];
      if (expr.empty() || !shape::IsDimExpr(expr)) continue;
      absl::StatusOr<int64_t> want = shape::EvalDimExpr(expr, values);
      if (!want.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("input '", sig.inputs[k].name, "' dim ", i,
                                                       ": ", want.status().message()));
      }
      if (inputs[k].shape()[i] != *want) {
        return absl::InvalidArgumentError(absl::StrCat("input '", sig.inputs[k].name, "' dim ", i,
                                                       " ('", expr, "') is ", inputs[k].shape()[i],
                                                       ", but the other inputs make it ", *want));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::map<std::string, int64_t>> DynamicDimValues(const ModelSignature& sig,
                                                                const std::vector<Tensor>& inputs) {
  std::map<std::string, int64_t> values;
  std::map<std::string, size_t> first;  // symbol -> the input that gave its size
  for (size_t k = 0; k < sig.dim_symbols.size() && k < inputs.size(); ++k) {
    for (size_t i = 0; i < sig.dim_symbols[k].size() && i < inputs[k].shape().size(); ++i) {
      const std::string& sym = sig.dim_symbols[k][i];
      if (sym.empty() || shape::IsDimExpr(sym)) continue;
      const int64_t size = inputs[k].shape()[i];
      if (auto r = sig.dim_ranges.find(sym);
          r != sig.dim_ranges.end() && (size < r->second.first || size > r->second.second)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "input '", sig.inputs[k].name, "' dim ", i, " ('", sym, "') is ", size,
            ", outside the sizes the model serves, [", r->second.first, ", ", r->second.second,
            "] (model config dynamic_dims: {", sym, ": [min, max]})"));
      }
      auto [it, inserted] = values.emplace(sym, size);
      if (inserted) {
        first[sym] = k;
      } else if (it->second != size) {
        return absl::InvalidArgumentError(
            absl::StrCat("input '", sig.inputs[k].name, "' dim ", i, " ('", sym, "') is ", size,
                         ", but input '", sig.inputs[first[sym]].name, "' has ", it->second));
      }
    }
  }
  RETURN_IF_ERROR(CheckDerivedDims(sig, inputs, values));
  return values;
}

namespace {

// Ones for input `k` a request left out (ModelSignature::ones_when_absent), sized by what
// the given inputs say, already checked: their batch (`rows`) and their dims' values within
// the model's ranges (`values`), so nothing unbounded is allocated.
absl::StatusOr<Tensor> OnesFor(const ModelSignature& sig, size_t k, int64_t rows,
                               const std::map<std::string, int64_t>& values) {
  const runtime::TensorSpec& spec = sig.inputs[k];
  std::vector<int64_t> shape(spec.shape.size());
  for (size_t i = 0; i < shape.size(); ++i) {
    const std::string s = i < sig.dim_symbols[k].size() ? sig.dim_symbols[k][i] : "";
    absl::StatusOr<int64_t> size = i == 0 && sig.batchable ? absl::StatusOr<int64_t>(rows)
                                   : s.empty()             ? spec.shape[i]
                                                           : shape::EvalDimExpr(s, values);
    // Every symbol it names is bounded by its range, or it is refused.
    for (const std::string& term :
         s.empty() ? std::vector<std::string>{} : shape::DimExprSymbols(s)) {
      if (!sig.dim_ranges.count(term)) size = absl::InvalidArgumentError("unbounded");
    }
    if (!size.ok() || *size < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "missing input '", spec.name, "': the other inputs do not give its dim ", i));
    }
    shape[i] = *size;
  }
  Tensor ones(spec.dtype, shape);
  for (int64_t i = 0; i < ones.numel(); ++i) ones.SetDouble(i, 1.0);
  return ones;
}

// The rules every transport's request meets once its inputs are decoded and placed in
// signature order (nullopt: not given): every input present, dtypes and shapes, one batch
// size, and a dynamic model's dims, computed here once and carried with the request. An input
// the server may fill (ones_when_absent) is made after the given ones are checked: its size
// comes from them (an absent input, undefined until then, gives no dim).
absl::StatusOr<ValidatedInputs> ValidatePlaced(const ModelSignature& sig,
                                               std::vector<std::optional<Tensor>> placed,
                                               Naming naming) {
  ValidatedInputs out;
  int64_t rows = -1;
  std::vector<size_t> filled;
  for (size_t i = 0; i < sig.inputs.size(); ++i) {
    const runtime::TensorSpec& spec = sig.inputs[i];
    if (!placed[i] && sig.ones_when_absent.count(spec.name)) {
      filled.push_back(i);
      out.tensors.emplace_back();
      continue;
    }
    if (!placed[i]) {
      return absl::InvalidArgumentError(
          absl::StrCat("missing input '", spec.name, "' (", SpecText(spec, naming), ")"));
    }
    RETURN_IF_ERROR(CheckAgainstSpec(sig, spec, *placed[i], rows, naming));
    out.tensors.push_back(std::move(*placed[i]));
  }
  if (sig.dynamic()) {
    ASSIGN_OR_RETURN(out.dims, DynamicDimValues(sig, out.tensors));
  }
  for (size_t i : filled) {
    ASSIGN_OR_RETURN(out.tensors[i], OnesFor(sig, i, rows, out.dims));
  }
  out.rows = sig.batchable ? rows : 1;
  return out;
}

size_t SpecIndex(const ModelSignature& sig, const std::string& name) {
  size_t i = 0;
  while (i < sig.inputs.size() && sig.inputs[i].name != name) ++i;
  return i;
}

}  // namespace

absl::StatusOr<ValidatedInputs> ValidateNamedInputs(const ModelSignature& sig,
                                                    std::vector<NamedTensor> inputs) {
  std::vector<std::optional<Tensor>> placed(sig.inputs.size());
  for (NamedTensor& in : inputs) {
    const size_t i = SpecIndex(sig, in.name);
    if (i == sig.inputs.size()) return UnknownInput(sig, in.name);
    if (placed[i]) {
      return absl::InvalidArgumentError(absl::StrCat("input '", in.name, "' is given twice"));
    }
    placed[i] = std::move(in.tensor);
  }
  return ValidatePlaced(sig, std::move(placed), Naming::kKServe);
}

absl::Status CheckDeclaredInput(const ModelSignature& sig, const std::string& name, DType dtype,
                                const std::vector<int64_t>& shape) {
  for (const runtime::TensorSpec& spec : sig.inputs) {
    if (spec.name != name) continue;
    int64_t rows = -1;
    return CheckAgainstSpec(sig, spec, dtype, shape, rows, Naming::kKServe);
  }
  return UnknownInput(sig, name);
}

absl::StatusOr<std::vector<size_t>> SelectNamedOutputs(const ModelSignature& sig,
                                                       const std::vector<std::string>& names,
                                                       const char* where) {
  std::vector<size_t> out;
  if (names.empty()) {
    for (size_t i = 0; i < sig.outputs.size(); ++i) out.push_back(i);
    return out;
  }
  for (const std::string& name : names) {
    size_t i = 0;
    while (i < sig.outputs.size() && sig.outputs[i].name != name) ++i;
    if (i == sig.outputs.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown output '", EchoName(name), "' ", where,
                       "; the model has: ", absl::StrJoin(OutputNames(sig), ", ")));
    }
    if (std::find(out.begin(), out.end(), i) != out.end()) {
      return absl::InvalidArgumentError(absl::StrCat("output '", name, "' is requested twice"));
    }
    out.push_back(i);
  }
  return out;
}

absl::StatusOr<ValidatedInputs> ValidateInputs(const ModelSignature& sig,
                                               ProtoTensorMap* inputs_ptr) {
  ProtoTensorMap& inputs = *inputs_ptr;
  // Names first, so no data is decoded for a request the model refuses by name.
  for (const auto& [name, tensor] : inputs) {
    if (SpecIndex(sig, name) == sig.inputs.size()) return UnknownInput(sig, name);
  }
  std::vector<std::optional<Tensor>> placed(sig.inputs.size());
  for (size_t i = 0; i < sig.inputs.size(); ++i) {
    auto it = inputs.find(sig.inputs[i].name);
    if (it == inputs.end()) continue;  // ValidatePlaced names it
    ASSIGN_OR_RETURN(placed[i],
                     TakeTensor(&it->second, absl::StrCat("input '", sig.inputs[i].name, "'")));
  }
  return ValidatePlaced(sig, std::move(placed), Naming::kOnnx);
}

absl::StatusOr<std::vector<size_t>> SelectOutputs(
    const ModelSignature& sig, const google::protobuf::RepeatedPtrField<std::string>& filter) {
  return SelectNamedOutputs(sig, std::vector<std::string>(filter.begin(), filter.end()),
                            "in output_filter");
}

std::optional<int64_t> ResponseBytesBound(const ModelSignature& sig,
                                          const std::vector<size_t>& selected, int64_t rows) {
  // In double: a hostile shape times a hostile row count must not wrap around.
  double total = 0;
  for (size_t i : selected) {
    const runtime::TensorSpec& s = sig.outputs[i];
    double bytes = static_cast<double>(DTypeSize(s.dtype));
    for (size_t d = 0; d < s.shape.size(); ++d) {
      if (d == 0 && sig.batchable) {
        bytes *= static_cast<double>(rows);
      } else if (s.shape[d] < 0) {
        return std::nullopt;
      } else {
        bytes *= static_cast<double>(s.shape[d]);
      }
    }
    total += bytes;
  }
  return total > 9e18 ? std::numeric_limits<int64_t>::max() : static_cast<int64_t>(total);
}

int64_t ResponseBytes(const std::vector<Tensor>& outputs, const std::vector<size_t>& selected) {
  int64_t total = 0;
  for (size_t i : selected) total += static_cast<int64_t>(outputs.at(i).nbytes());
  return total;
}

absl::Status CheckResponseBytes(int64_t bytes, int64_t limit) {
  if (bytes <= limit) return absl::OkStatus();
  return absl::ResourceExhaustedError(
      absl::StrCat("the response would carry ", bytes,
                   " bytes of outputs, more than the server's message "
                   "limit of ",
                   limit, " bytes (server.max_message_bytes); ask for fewer rows or outputs"));
}

absl::Status CheckResponseBound(const ModelSignature& sig, const std::vector<size_t>& selected,
                                int64_t rows, int64_t limit) {
  const std::optional<int64_t> bound = ResponseBytesBound(sig, selected, rows);
  return bound ? CheckResponseBytes(*bound, limit) : absl::OkStatus();
}

}  // namespace kiln::server
