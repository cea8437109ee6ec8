// Private to the NN shape rules (rules_nn.cc, rules_nn_linalg.cc): the per-file registration
// functions RegisterNnRules calls.
#pragma once

#include "compiler/shape/infer.h"

namespace kiln::shape {

void RegisterNnLinalgRules(RuleRegistry& r);  // Gemm, MatMul, Einsum
void RegisterAttentionRules(RuleRegistry& r);  // Attention, RotaryEmbedding
void RegisterLossRules(RuleRegistry& r);      // NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss

}  // namespace kiln::shape
