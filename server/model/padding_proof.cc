#include "server/model/padding_proof.h"

#include <algorithm>
#include <memory>

#include "absl/strings/str_cat.h"
#include "compiler/shape/dim_expr.h"
#include "compiler/shape/infer.h"
#include "ops/interpreter.h"

namespace kiln::server {

std::string PaddingPlan::ToString() const {
  std::string s;
  for (const auto& [symbol, sizes] : classes) {
    if (!s.empty()) s += "; ";
    absl::StrAppend(&s, symbol, ":");
    for (int64_t n : sizes) absl::StrAppend(&s, " ", n);
  }
  return s;
}

namespace {

// The model at batch 1 with `dims` bound, shapes inferred.
absl::StatusOr<std::unique_ptr<Graph>> At(const Graph& model, const DimValues& dims) {
  std::unique_ptr<Graph> g = model.Clone();
  RETURN_IF_ERROR(shape::Specialize(*g, 1, dims));
  return g;
}

// Per output, per dim: the symbol whose size that dim has at both probes ("" when the dim
// does not change between them). FAILED_PRECONDITION for a dim that changes otherwise.
absl::StatusOr<DimSymbols> OutputSymbols(const Graph& small, const Graph& padded,
                                         const DimValues& real, const DimValues& pad,
                                         const std::vector<std::string>& sums) {
  DimSymbols out;
  for (size_t k = 0; k < small.outputs.size(); ++k) {
    const Value* a = small.outputs[k];
    const Value* b = padded.outputs[k];
    if (!a->shape || !b->shape || !IsStatic(*a->shape) || !IsStatic(*b->shape) ||
        a->shape->size() != b->shape->size()) {
      return absl::FailedPreconditionError(
          absl::StrCat("output '", a->name, "' has no static shape at the probe sizes"));
    }
    std::vector<std::string>& row = out.emplace_back(a->shape->size());
    for (size_t i = 0; i < row.size(); ++i) {
      const int64_t sa = (*a->shape)[i].value, sb = (*b->shape)[i].value;
      if (sa == sb) continue;
      for (const auto& [symbol, size] : real) {
        if (size == sa && pad.at(symbol) == sb) row[i] = symbol;
      }
      for (const std::string& sum : sums) {  // "past + sequence": a Concat(past, new) output
        if (!row[i].empty()) break;
        absl::StatusOr<int64_t> at_real = shape::EvalDimExpr(sum, real);
        absl::StatusOr<int64_t> at_pad = shape::EvalDimExpr(sum, pad);
        if (at_real.ok() && at_pad.ok() && *at_real == sa && *at_pad == sb) row[i] = sum;
      }
      if (row[i].empty()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "output '", a->name, "' dim ", i, " is ", sa, " and ", sb,
            " at the two probe sizes: neither a padded dim nor a sum of them, so a request's "
            "part of it cannot be cut out"));
      }
    }
  }
  return out;
}

// A feed in graph input order (ResizeToDims takes tensor lists).
std::vector<Tensor> InOrder(const Graph& g, const ref::TensorMap& feed) {
  std::vector<Tensor> v;
  for (const Value* in : g.inputs) v.push_back(feed.at(in->name));
  return v;
}

// Probe sizes per symbol: a few positions (`real`) and those plus a few padded ones (`pad`),
// distinct per symbol so an output dim names its symbol. Symbols whose range has one size
// are left out (nothing to pad).
void ProbeSizes(const ModelConfig& config, const DimSymbols& inputs, DimValues& real,
                DimValues& pad) {
  int64_t j = 0;
  for (const auto& [symbol, typical] : config.dynamic_dims) {
    bool used = false;
    for (const auto& row : inputs) used |= std::count(row.begin(), row.end(), symbol) > 0;
    auto range = config.dynamic_dim_ranges.find(symbol);
    if (!used || range == config.dynamic_dim_ranges.end()) continue;
    const auto [lo, hi] = range->second;
    const int64_t r = std::clamp<int64_t>(2 + j, lo, hi), p = std::min(hi, r + 3 + j);
    real[symbol] = r;  // a dim with one size keeps it in both (a sum may name it)
    pad[symbol] = p;
    ++j;
  }
}

// The reference run at `real` vs the same feed padded to `pad` and its outputs cut back.
absl::Status CompareRuns(const Graph& small, const Graph& padded, const DimSymbols& inputs,
                         const DimSymbols& outputs, const DimValues& real, const DimValues& pad,
                         const RangesFor& ranges_for, const WarmupConfig& warmup) {
  const check::InputRanges ranges = ranges_for(small);
  ASSIGN_OR_RETURN(ref::TensorMap feed, check::RandomInputs(small, ranges));
  SetMasksToOnes(ranges, feed);  // an unpadded request attends everywhere
  ASSIGN_OR_RETURN(std::vector<Tensor> padded_in,
                   ResizeToDims(InOrder(small, feed), inputs, real, pad));
  ref::TensorMap padded_feed;
  for (size_t k = 0; k < padded.inputs.size(); ++k) {
    padded_feed[padded.inputs[k]->name] = padded_in[k];
  }
  ASSIGN_OR_RETURN(ref::TensorMap want, ref::Run(small, feed));
  ASSIGN_OR_RETURN(ref::TensorMap got_padded, ref::Run(padded, padded_feed));
  std::vector<Tensor> got_list;
  for (const Value* o : padded.outputs) got_list.push_back(got_padded.at(o->name));
  ASSIGN_OR_RETURN(got_list, ResizeToDims(std::move(got_list), outputs, pad, real));
  ref::TensorMap got;
  for (size_t k = 0; k < padded.outputs.size(); ++k) got[padded.outputs[k]->name] = got_list[k];
  const check::Tolerance tol =
      check::ScaledToOutputs(want, check::Tolerance{warmup.rtol, warmup.atol, {}});
  const check::Divergence d = check::CompareOutputs(want, got, tol);
  if (!d.ok) {
    return absl::FailedPreconditionError(
        absl::StrCat("the outputs move when the inputs are zero-padded (", d.message, ")"));
  }
  return absl::OkStatus();
}

// The config's own classes of `symbol` must cover its served range [lo, hi].
absl::Status CheckGivenClasses(const std::string& symbol, const std::vector<int64_t>& classes,
                               int64_t lo, int64_t hi) {
  if (classes.back() != hi || classes.front() < lo) {
    return absl::InvalidArgumentError(absl::StrCat("dynamic_dims.", symbol,
                                                   ".classes must lie in the range [", lo, ", ", hi,
                                                   "] and end at its max ", hi));
  }
  return absl::OkStatus();
}

}  // namespace

void SetMasksToOnes(const check::InputRanges& ranges, ref::TensorMap& feed) {
  for (const std::string& mask : ranges.binary) {
    auto it = feed.find(mask);
    if (it == feed.end()) continue;
    Tensor ones(it->second.dtype(), it->second.shape());
    const Tensor one = Tensor::Scalar(it->second.dtype(), 1.0);
    const size_t elem = DTypeSize(ones.dtype());
    for (int64_t i = 0; i < ones.numel(); ++i) {
      std::copy_n(static_cast<const char*>(one.raw()), elem,
                  static_cast<char*>(ones.raw_mutable()) + i * elem);
    }
    it->second = ones;
  }
}

absl::StatusOr<PaddingPlan> ProvePadding(const Graph& model, const ModelConfig& config,
                                         const DimSymbols& inputs, const RangesFor& ranges_for,
                                         size_t max_classes) {
  for (size_t k = 0; k < inputs.size() && k < model.inputs.size(); ++k) {
    for (size_t i = 0; i < inputs[k].size(); ++i) {
      std::vector<std::pair<std::string, int64_t>> terms;
      if (!inputs[k][i].empty() && shape::IsDimExpr(inputs[k][i]) &&
          !shape::SumTerms(inputs[k][i], &terms)) {
        return absl::FailedPreconditionError(
            absl::StrCat("input '", model.inputs[k]->name, "' dim ", i, " is '", inputs[k][i],
                         "', which is not a sum of dims: padding it is not supported"));
      }
    }
  }
  DimValues real, pad;
  ProbeSizes(config, inputs, real, pad);
  if (real == pad) return absl::FailedPreconditionError("no dynamic dim has two sizes to pad");
  for (const auto& [symbol, size] : real) {
    const int64_t end = config.dynamic_dim_ranges.at(symbol).second;
    if (size != pad.at(symbol) && end > kMaxClassSize) {
      return absl::FailedPreconditionError(absl::StrCat(
          "'", symbol, "' is served up to ", end, ", above the ", kMaxClassSize,
          " positions shape classes build engines for at load (narrow it: dynamic_dims: {", symbol,
          ": [1, ", kMaxClassSize, "]})"));
    }
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Graph> small, At(model, real));
  ASSIGN_OR_RETURN(std::unique_ptr<Graph> padded, At(model, pad));
  PaddingPlan plan;
  plan.inputs = inputs;
  for (auto& row : plan.inputs) {  // only the symbols that pad, and sums of them
    for (std::string& s : row) {
      std::vector<std::pair<std::string, int64_t>> terms;
      if (real.count(s) && real.at(s) != pad.at(s)) continue;  // a padded dim
      if (real.count(s)) {                                     // a dim of one size: nothing to pad
        s.clear();
        continue;
      }
      if (shape::SumTerms(s, &terms)) {
        if (shape::EvalDimExpr(s, real).ok()) continue;
        return absl::FailedPreconditionError(
            absl::StrCat("a dim is '", s, "', which names a dim that is not padded"));
      }
      s.clear();
    }
  }
  std::vector<std::string> sums;
  auto note_sum = [&](const std::string& label) {
    std::vector<std::pair<std::string, int64_t>> terms;
    if (shape::SumTerms(label, &terms) &&
        std::find(sums.begin(), sums.end(), label) == sums.end()) {
      sums.push_back(label);
    }
  };
  for (const auto& row : plan.inputs)
    for (const std::string& l : row) note_sum(l);
  for (const Value* o : model.outputs) {
    if (o->shape)
      for (const Dim& d : *o->shape) note_sum(d.param);
  }
  ASSIGN_OR_RETURN(plan.outputs, OutputSymbols(*small, *padded, real, pad, sums));
  RETURN_IF_ERROR(CompareRuns(*small, *padded, plan.inputs, plan.outputs, real, pad, ranges_for,
                              config.warmup));
  for (bool coarse : {false, true}) {
    plan.classes.clear();
    size_t combinations = 1;
    for (const auto& [symbol, size] : real) {
      if (size == pad.at(symbol)) continue;  // one size: no classes
      const auto [lo, hi] = config.dynamic_dim_ranges.at(symbol);
      auto given = config.dynamic_dim_classes.find(symbol);
      if (given != config.dynamic_dim_classes.end()) {
        RETURN_IF_ERROR(CheckGivenClasses(symbol, given->second, lo, hi));
        plan.classes[symbol] = given->second;
      } else {
        plan.classes[symbol] = ClassLadder(lo, hi, config.dynamic_dims.at(symbol), coarse);
      }
      combinations *= plan.classes[symbol].size();
    }
    if (combinations <= max_classes) return plan;
  }
  return absl::FailedPreconditionError(
      absl::StrCat("the class ladders of the dynamic dims make more than ", max_classes,
                   " combinations (narrow the ranges in dynamic_dims)"));
}

}  // namespace kiln::server
