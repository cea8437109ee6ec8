#include "server/request_validation.h"

#include "absl/strings/str_join.h"
#include "server/echo.h"
#include "server/tensor_codec.h"

namespace kiln::server {
namespace {

std::string SpecText(const runtime::TensorSpec& s) {
  std::vector<std::string> dims;
  for (int64_t d : s.shape) dims.push_back(d < 0 ? "batch" : std::to_string(d));
  return absl::StrCat(DTypeName(s.dtype), "[", absl::StrJoin(dims, ","), "]");
}

std::vector<std::string> InputNames(const ModelSignature& sig) {
  std::vector<std::string> names;
  for (const auto& s : sig.inputs) names.push_back(s.name);
  return names;
}

// Checks one decoded tensor against its spec; `rows` is the batch size seen so far (-1 none).
absl::Status CheckAgainstSpec(const ModelSignature& sig, const runtime::TensorSpec& spec,
                              const Tensor& t, int64_t& rows) {
  const std::string what = absl::StrCat("input '", spec.name, "'");
  if (t.dtype() != spec.dtype) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": dtype ", DTypeName(t.dtype()),
                                                   ", the model takes ", SpecText(spec)));
  }
  bool match = t.rank() == static_cast<int64_t>(spec.shape.size());
  for (size_t i = 0; match && i < spec.shape.size(); ++i) {
    match = spec.shape[i] < 0 ? t.dim(i) >= 1 : t.dim(i) == spec.shape[i];
  }
  if (!match) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": shape ", ShapeToString(t.shape()),
                                                   ", the model takes ", SpecText(spec)));
  }
  if (!sig.batchable) return absl::OkStatus();
  if (t.dim(0) > sig.max_batch_size) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": batch of ", t.dim(0),
                                                   " exceeds max_batch_size ", sig.max_batch_size));
  }
  if (rows >= 0 && t.dim(0) != rows) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": batch dim ", t.dim(0), " differs from the other inputs' ", rows));
  }
  rows = t.dim(0);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ValidatedInputs> ValidateInputs(const ModelSignature& sig, ProtoTensorMap* inputs_ptr) {
  ProtoTensorMap& inputs = *inputs_ptr;
  for (const auto& [name, tensor] : inputs) {
    bool known = false;
    for (const auto& s : sig.inputs) known |= s.name == name;
    if (!known) {
      return absl::InvalidArgumentError(absl::StrCat("unknown input '", EchoName(name), "'; the model takes: ",
                                                     absl::StrJoin(InputNames(sig), ", ")));
    }
  }
  ValidatedInputs out;
  int64_t rows = -1;
  for (const auto& spec : sig.inputs) {
    auto it = inputs.find(spec.name);
    if (it == inputs.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("missing input '", spec.name, "' (", SpecText(spec), ")"));
    }
    ASSIGN_OR_RETURN(Tensor t, TakeTensor(&it->second, absl::StrCat("input '", spec.name, "'")));
    RETURN_IF_ERROR(CheckAgainstSpec(sig, spec, t, rows));
    out.tensors.push_back(std::move(t));
  }
  out.rows = sig.batchable ? rows : 1;
  return out;
}

absl::StatusOr<std::vector<size_t>> SelectOutputs(
    const ModelSignature& sig, const google::protobuf::RepeatedPtrField<std::string>& filter) {
  std::vector<size_t> out;
  if (filter.empty()) {
    for (size_t i = 0; i < sig.outputs.size(); ++i) out.push_back(i);
    return out;
  }
  for (const std::string& name : filter) {
    size_t i = 0;
    while (i < sig.outputs.size() && sig.outputs[i].name != name) ++i;
    if (i == sig.outputs.size()) {
      std::vector<std::string> names;
      for (const auto& s : sig.outputs) names.push_back(s.name);
      return absl::InvalidArgumentError(absl::StrCat("unknown output '", EchoName(name),
                                                     "' in output_filter; the model has: ",
                                                     absl::StrJoin(names, ", ")));
    }
    out.push_back(i);
  }
  return out;
}

}  // namespace kiln::server
