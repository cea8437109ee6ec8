// A toy decoder for the generation loop's unit tests: a signature in the decoder contract's
// form and a step whose next token depends on every visible cached position, so a wrong page,
// mask, position or padding changes the tokens; NextToken is the same rule on a token list.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>

#include "base/status.h"
#include "ir/tensor.h"
#include "server/common/model_signature.h"

namespace kiln::server::generate::testing {

constexpr int64_t kVocab = 97;

// A step as the generator runs it (server/generate/generator.h StepFn), without the include.
using StepFnLike = std::function<absl::StatusOr<std::vector<Tensor>>(
    std::vector<Tensor> inputs, int64_t rows, std::vector<Tensor> reuse)>;

// [batch, seq] ids/positions, mask over "past + seq", one cache tensor [batch, 1, past, 2].
inline ModelSignature ToySignature() {
  ModelSignature sig;
  using runtime::TensorSpec;
  sig.inputs = {TensorSpec{"input_ids", DType::kInt64, {-1, -1}},
                TensorSpec{"attention_mask", DType::kInt64, {-1, -1}},
                TensorSpec{"position_ids", DType::kInt64, {-1, -1}},
                TensorSpec{"past_key_values.0.key", DType::kFloat32, {-1, 1, -1, 2}}};
  sig.outputs = {TensorSpec{"logits", DType::kFloat32, {-1, -1, kVocab}},
                 TensorSpec{"present.0.key", DType::kFloat32, {-1, 1, -1, 2}}};
  sig.dim_symbols = {{"", "seq"}, {"", "past + seq"}, {"", "seq"}, {"", "", "past", ""}};
  sig.default_dims = {{"past", 1}, {"seq", 1}};
  sig.dim_ranges = {{"past", {1, 200}}, {"seq", {1, 16}}};
  return sig;
}

// The rule: after tokens t_0..t_{n-1}, the next is (sum_j t_j * (j + 1) + n - 1) mod vocab.
inline int64_t NextToken(const std::vector<int64_t>& tokens) {
  int64_t s = static_cast<int64_t>(tokens.size()) - 1;
  for (size_t j = 0; j < tokens.size(); ++j) s += tokens[j] * static_cast<int64_t>(j + 1);
  return s % kVocab;
}

inline std::vector<int64_t> Expected(std::vector<int64_t> prompt, int64_t n) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < n; ++i) {
    out.push_back(NextToken(prompt));
    prompt.push_back(out.back());
  }
  return out;
}

// The toy model as a step: present = past ++ (id, position) per new position; each new
// position's logits are one-hot at the rule applied to the positions its mask and the
// causal order let it see (weighting the j-th visible one by j + 1).
inline absl::StatusOr<std::vector<Tensor>> ToyStep(std::vector<Tensor> in, int64_t rows,
                                            std::vector<Tensor> = {}) {
  const Tensor &ids = in[0], &mask = in[1], &pos = in[2], &past = in[3];
  const int64_t c = ids.dim(1), P = past.dim(2);
  if (mask.dim(1) != P + c || ids.dim(0) != rows) return absl::InvalidArgumentError("shapes");
  std::vector<Tensor> out{Tensor(DType::kFloat32, {rows, c, kVocab}),
                          Tensor(DType::kFloat32, {rows, 1, P + c, 2})};
  for (int64_t b = 0; b < rows; ++b) {
    float* present = out[1].mutable_data<float>() + b * (P + c) * 2;
    std::copy_n(past.data<float>() + b * P * 2, P * 2, present);
    for (int64_t k = 0; k < c; ++k) {
      present[(P + k) * 2] = static_cast<float>(ids.GetInt(b * c + k));
      present[(P + k) * 2 + 1] = static_cast<float>(pos.GetInt(b * c + k));
    }
    for (int64_t k = 0; k < c; ++k) {
      int64_t s = pos.GetInt(b * c + k), j = 0;
      for (int64_t t = 0; t <= P + k; ++t) {
        if (mask.GetInt(b * (P + c) + t) == 0) continue;
        if (static_cast<int64_t>(present[t * 2 + 1]) != j) return absl::InternalError("order");
        s += static_cast<int64_t>(present[t * 2]) * ++j;
      }
      out[0].mutable_data<float>()[(b * c + k) * kVocab + s % kVocab] = 1.0f;
    }
  }
  return out;
}

// The toy signature without its attention mask: a decoder that attends to its whole cache,
// whose cache's length starts at 0 (its first step has none).
inline ModelSignature MasklessToySignature() {
  ModelSignature sig = ToySignature();
  sig.inputs.erase(sig.inputs.begin() + 1);
  sig.dim_symbols.erase(sig.dim_symbols.begin() + 1);
  sig.dim_ranges["past"] = {0, 200};
  return sig;
}

// The toy step seeing every cached position, whatever a mask says: for the masked signature
// (`mask_at` 1: the mask is replaced by ones, as a model whose positions come from the cache's
// length ignores what the mask hides) or the maskless one (`mask_at` -1). A padded past then
// reads as positions out of order and fails the step.
inline StepFnLike SeesEveryPosition(int64_t mask_at) {
  return [mask_at](std::vector<Tensor> in, int64_t rows,
                   std::vector<Tensor>) -> absl::StatusOr<std::vector<Tensor>> {
    const int64_t c = in[0].dim(1), P = in.back().dim(2);
    Tensor ones(DType::kInt64, {rows, P + c});
    for (int64_t i = 0; i < ones.numel(); ++i) ones.SetInt(i, 1);
    if (mask_at < 0) {
      in.insert(in.begin() + 1, std::move(ones));
    } else {
      in[static_cast<size_t>(mask_at)] = std::move(ones);
    }
    return ToyStep(std::move(in), rows);
  };
}

// The toy model as an appending step (runtime::Engine::RunAppending): the past is what the
// present passed in holds before its last `c` positions (the past input is not read), the
// new positions are written after it, the logits over the given tensor. INVALID_ARGUMENT
// when the outputs are not passed at their shapes (an engine refuses them too).
inline absl::StatusOr<std::vector<Tensor>> ToyAppendingStep(std::vector<Tensor> in, int64_t rows,
                                                            std::vector<Tensor> out) {
  const Tensor &ids = in[0], &mask = in[1], &pos = in[2], &past = in[3];
  const int64_t c = ids.dim(1), P = past.dim(2);
  if (out.size() != 2 || out[0].shape() != std::vector<int64_t>{rows, c, kVocab} ||
      out[1].shape() != std::vector<int64_t>{rows, 1, P + c, 2}) {
    return absl::InvalidArgumentError("an in-place append needs the outputs at their shapes");
  }
  // The past as it stands in the presents: what the plain step would have been given.
  in[3] = Tensor(DType::kFloat32, {rows, 1, P, 2});
  for (int64_t b = 0; b < rows; ++b) {
    std::copy_n(out[1].data<float>() + b * (P + c) * 2, P * 2,
                in[3].mutable_data<float>() + b * P * 2);
  }
  ASSIGN_OR_RETURN(std::vector<Tensor> made, ToyStep(std::move(in), rows));
  for (size_t k = 0; k < 2; ++k) {
    std::copy_n(made[k].data<float>(), made[k].numel(), out[k].mutable_data<float>());
  }
  (void)mask;
  (void)pos;
  return out;
}

}  // namespace kiln::server::generate::testing
