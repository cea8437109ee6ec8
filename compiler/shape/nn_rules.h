// Private to the NN shape rules (rules_nn.cc, rules_nn_linalg.cc): the per-file registration
// functions RegisterNnRules calls.
#pragma once

#include <optional>

#include "compiler/shape/infer.h"

namespace kiln::shape {

void RegisterNnLinalgRules(RuleRegistry& r);  // Gemm, MatMul, Einsum
void RegisterAttentionRules(RuleRegistry& r);  // Attention, RotaryEmbedding
void RegisterQuantizeRules(RuleRegistry& r);  // Q/DQ, QLinear*, *Integer
void RegisterGridRules(RuleRegistry& r);      // GridSample, AffineGrid
void RegisterDetectionRules(RuleRegistry& r);  // NonMaxSuppression, RoiAlign
void RegisterRecurrentRules(RuleRegistry& r);  // RNN, GRU, LSTM
void RegisterLossRules(RuleRegistry& r);      // NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss
void RegisterSignalRules(RuleRegistry& r);    // DFT, STFT, windows, MelWeightMatrix

// MatMul's output shape for operands ai and bi (numpy batch broadcasting, 1-D operands);
// nullopt when either rank is unknown.
absl::StatusOr<std::optional<Shape>> MatMulOutputShape(const InferContext& ctx, size_t ai,
                                                       size_t bi);
// The same for given operand shapes (ai.kiln FusedMatMul passes them with transA/transB's
// last-two swap applied).
absl::StatusOr<std::optional<Shape>> MatMulShapes(const InferContext& ctx, std::optional<Shape> a,
                                                  std::optional<Shape> b);
// Conv's (or ConvTranspose's) output shape for X at input xi and W at input wi; nullopt when
// X's rank is unknown.
absl::StatusOr<std::optional<Shape>> ConvOutputShape(const InferContext& ctx, size_t xi,
                                                     size_t wi, bool transpose);

}  // namespace kiln::shape
