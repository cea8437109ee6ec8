#include "server/generate/decoder_contract.h"

#include <map>
#include <optional>

#include "absl/strings/str_cat.h"

namespace kiln::server::generate {
namespace {

bool IsIntType(DType t) { return t == DType::kInt64 || t == DType::kInt32; }

std::optional<size_t> FindSpec(const std::vector<runtime::TensorSpec>& specs,
                               const std::string& name) {
  for (size_t i = 0; i < specs.size(); ++i) {
    if (specs[i].name == name) return i;
  }
  return std::nullopt;
}

// An int input [batch, <symbol or expression>] named `name`.
absl::StatusOr<size_t> TokenInput(const ModelSignature& sig, const std::string& name) {
  std::optional<size_t> i = FindSpec(sig.inputs, name);
  if (!i) return absl::FailedPreconditionError(absl::StrCat("no input '", name, "'"));
  const runtime::TensorSpec& s = sig.inputs[*i];
  if (!IsIntType(s.dtype) || s.shape.size() != 2) {
    return absl::FailedPreconditionError(
        absl::StrCat("input '", name, "' is ", DTypeName(s.dtype), " ", ShapeToString(s.shape),
                     ", not an int32/int64 [batch, positions] tensor"));
  }
  return *i;
}

// The symbol input `k` carries at dim `d` ("" for none).
std::string SymbolAt(const ModelSignature& sig, size_t k, size_t d) {
  if (k >= sig.dim_symbols.size() || d >= sig.dim_symbols[k].size()) return "";
  return sig.dim_symbols[k][d];
}

// Fills `c`'s layout from the past input's spec: one dim carries `past_symbol`, the rest
// (batch aside) are fixed.
absl::Status CacheLayout(const ModelSignature& sig, const std::string& past_symbol,
                         CacheTensor& c) {
  const runtime::TensorSpec& in = sig.inputs[c.input];
  const runtime::TensorSpec& out = sig.outputs[c.output];
  c.dtype = in.dtype;
  c.axis = -1;
  for (size_t d = 1; d < in.shape.size(); ++d) {
    if (SymbolAt(sig, c.input, d) == past_symbol) c.axis = static_cast<int64_t>(d);
  }
  if (c.axis < 0 || out.dtype != in.dtype || out.shape.size() != in.shape.size()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cache input '", in.name, "' ", ShapeToString(in.shape), " and output '", out.name,
        "' ", ShapeToString(out.shape), " are not one cache grown along '", past_symbol, "'"));
  }
  c.outer = c.inner = 1;
  for (size_t d = 1; d < in.shape.size(); ++d) {
    if (static_cast<int64_t>(d) == c.axis) continue;
    if (in.shape[d] <= 0 || out.shape[d] != in.shape[d]) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cache input '", in.name, "' dim ", d, " is not one fixed size in it and in '",
          out.name, "'"));
    }
    (static_cast<int64_t>(d) < c.axis ? c.outer : c.inner) *= in.shape[d];
  }
  return absl::OkStatus();
}

// The past symbol: the dim every cache input shares that input_ids does not carry.
absl::StatusOr<std::string> PastSymbol(const ModelSignature& sig, size_t first_cache,
                                       const std::string& sequence) {
  for (size_t d = 1; d < sig.inputs[first_cache].shape.size(); ++d) {
    const std::string s = SymbolAt(sig, first_cache, d);
    if (!s.empty() && s != sequence) return s;
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "cache input '", sig.inputs[first_cache].name,
      "' has no dynamic past dim (the model's dynamic dims must include the cache's length)"));
}

absl::Status FindLogits(const ModelSignature& sig, const std::string& name, DecoderContract& c) {
  std::optional<size_t> i = FindSpec(sig.outputs, name);
  if (!i) {
    return absl::FailedPreconditionError(
        absl::StrCat("no output '", name, "' [batch, positions, vocab]"));
  }
  const runtime::TensorSpec& s = sig.outputs[*i];
  if (s.dtype != DType::kFloat32 || s.shape.size() != 3 || s.shape[2] <= 0) {
    return absl::FailedPreconditionError(absl::StrCat("output '", name, "' is ", DTypeName(s.dtype),
                                                      " ", ShapeToString(s.shape),
                                                      ", not float32 [batch, positions, vocab]"));
  }
  c.logits = *i;
  c.vocab = s.shape[2];
  return absl::OkStatus();
}

}  // namespace

int64_t DecoderContract::slot_bytes() const {
  int64_t n = 0;
  for (const CacheTensor& t : cache) n += t.slot_bytes();
  return n;
}

std::string PresentNameFor(const std::string& past_name) {
  for (const char* from : {"past_key_values", "past"}) {
    const size_t at = past_name.find(from);
    if (at != std::string::npos) {
      return past_name.substr(0, at) + "present" + past_name.substr(at + std::string(from).size());
    }
  }
  return "";
}

absl::StatusOr<DecoderContract> FindDecoderContract(const ModelSignature& sig,
                                                    const DecoderTensorNames& names) {
  if (!sig.dynamic()) {
    return absl::FailedPreconditionError("the model has no dynamic dims (a decoder's cache grows)");
  }
  DecoderContract c;
  ASSIGN_OR_RETURN(c.input_ids, TokenInput(sig, names.input_ids));
  if (FindSpec(sig.inputs, names.attention_mask)) {
    ASSIGN_OR_RETURN(c.attention_mask, TokenInput(sig, names.attention_mask));
    c.mask_dtype = sig.inputs[c.attention_mask].dtype;
  }
  if (FindSpec(sig.inputs, names.position_ids)) {
    ASSIGN_OR_RETURN(c.position_ids, TokenInput(sig, names.position_ids));
    c.positions_dtype = sig.inputs[c.position_ids].dtype;
  }
  c.ids_dtype = sig.inputs[c.input_ids].dtype;
  c.sequence_symbol = SymbolAt(sig, c.input_ids, 1);
  if (c.sequence_symbol.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("input '", names.input_ids, "' dim 1 is not a dynamic dim"));
  }
  RETURN_IF_ERROR(FindLogits(sig, names.logits, c));
  for (const auto& [past, present] : names.cache) {
    if (!FindSpec(sig.inputs, past)) {
      return absl::FailedPreconditionError(
          absl::StrCat("generation.tensors.cache names '", past, "', which is no input"));
    }
  }
  for (size_t k = 0; k < sig.inputs.size(); ++k) {
    if (k == c.input_ids || k == c.attention_mask || k == c.position_ids) continue;
    CacheTensor t;
    t.input = k;
    t.past_name = sig.inputs[k].name;
    auto named = names.cache.find(t.past_name);
    t.present_name = named != names.cache.end() ? named->second : PresentNameFor(t.past_name);
    std::optional<size_t> out =
        t.present_name.empty() ? std::nullopt : FindSpec(sig.outputs, t.present_name);
    if (!out) {
      return absl::FailedPreconditionError(absl::StrCat(
          "input '", t.past_name, "' is neither a token input nor a cache with a present output",
          t.present_name.empty() ? "" : absl::StrCat(" ('", t.present_name, "')")));
    }
    t.output = *out;
    if (c.cache.empty()) {
      ASSIGN_OR_RETURN(c.past_symbol, PastSymbol(sig, k, c.sequence_symbol));
    }
    RETURN_IF_ERROR(CacheLayout(sig, c.past_symbol, t));
    c.cache.push_back(t);
  }
  if (c.cache.empty()) return absl::FailedPreconditionError("no past/present cache inputs");
  return c;
}

}  // namespace kiln::server::generate
