#include "server/generate/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace kiln::server::generate {
namespace {

// log-sum-exp of `v` (finite entries; -inf ones count as zero probability).
double LogSumExp(const std::vector<double>& v) {
  double m = -std::numeric_limits<double>::infinity();
  for (double x : v) m = std::max(m, x);
  if (!std::isfinite(m)) return m;
  double s = 0;
  for (double x : v) s += std::exp(x - m);
  return m + std::log(s);
}

void ApplyPenalties(const SamplingParams& p, const std::unordered_map<int64_t, int64_t>& counts,
                    std::vector<double>& logits) {
  const int64_t vocab = static_cast<int64_t>(logits.size());
  for (const auto& [token, count] : counts) {
    if (token < 0 || token >= vocab || count <= 0) continue;
    double& l = logits[static_cast<size_t>(token)];
    if (p.repetition_penalty != 1.0) {
      l = l > 0 ? l / p.repetition_penalty : l * p.repetition_penalty;
    }
    l -= p.frequency_penalty * static_cast<double>(count) + p.presence_penalty;
  }
}

}  // namespace

absl::Status ValidateSampling(const SamplingParams& p) {
  auto bad = [](const char* field, double v, const char* range) {
    return absl::InvalidArgumentError(absl::StrCat(field, " is ", v, "; it must be ", range));
  };
  if (!(p.temperature >= 0 && p.temperature <= 100)) return bad("temperature", p.temperature, "in [0, 100]");
  if (p.top_k < 0) return bad("top_k", static_cast<double>(p.top_k), ">= 0");
  if (!(p.top_p > 0 && p.top_p <= 1)) return bad("top_p", p.top_p, "in (0, 1]");
  if (!(p.repetition_penalty > 0 && p.repetition_penalty <= 100)) {
    return bad("repetition_penalty", p.repetition_penalty, "in (0, 100]");
  }
  if (!(std::abs(p.frequency_penalty) <= 100)) return bad("frequency_penalty", p.frequency_penalty, "in [-100, 100]");
  if (!(std::abs(p.presence_penalty) <= 100)) return bad("presence_penalty", p.presence_penalty, "in [-100, 100]");
  return absl::OkStatus();
}

Sampler::Sampler(const SamplingParams& params, bool logprobs)
    : params_(params), logprobs_(logprobs) {
  rng_.seed(params.seed ? *params.seed : std::random_device{}());
}

Sampled Sampler::Next(const float* logits, int64_t vocab,
                      const std::unordered_map<int64_t, int64_t>& counts) {
  const bool greedy = params_.temperature == 0.0 || params_.top_k == 1;
  const bool penalties = params_.repetition_penalty != 1.0 || params_.frequency_penalty != 0.0 ||
                         params_.presence_penalty != 0.0;
  if (greedy && !logprobs_ && (!penalties || counts.empty())) {
    // The largest logit as it is (the first on ties, as below): no copy of the vocabulary,
    // which was a few percent of the loop at 16 streams of a small decoder.
    Sampled out;
    out.token = std::max_element(logits, logits + vocab) - logits;
    return out;
  }
  work_.assign(logits, logits + vocab);
  ApplyPenalties(params_, counts, work_);
  const double norm = logprobs_ ? LogSumExp(work_) : 0.0;
  Sampled out;
  if (greedy) {
    out.token = std::max_element(work_.begin(), work_.end()) - work_.begin();
    if (logprobs_) out.logprob = work_[static_cast<size_t>(out.token)] - norm;
    return out;
  }
  // Candidates by descending logit (ties by id, so a seed reproduces), cut by top-k.
  order_.resize(static_cast<size_t>(vocab));
  std::iota(order_.begin(), order_.end(), 0);
  const size_t k = params_.top_k > 0 ? std::min<size_t>(params_.top_k, order_.size()) : order_.size();
  auto by_logit = [this](int64_t a, int64_t b) {
    return work_[a] > work_[b] || (work_[a] == work_[b] && a < b);
  };
  std::partial_sort(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(k), order_.end(),
                    by_logit);
  order_.resize(k);
  // Probabilities at the temperature, then the smallest prefix whose mass reaches top_p.
  std::vector<double> prob(k);
  const double top = work_[order_[0]];
  double sum = 0;
  for (size_t i = 0; i < k; ++i) sum += prob[i] = std::exp((work_[order_[i]] - top) / params_.temperature);
  size_t keep = k;
  if (params_.top_p < 1.0) {
    double mass = 0;
    for (size_t i = 0; i < k; ++i) {
      mass += prob[i] / sum;
      if (mass >= params_.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  std::discrete_distribution<size_t> draw(prob.begin(), prob.begin() + static_cast<std::ptrdiff_t>(keep));
  out.token = order_[draw(rng_)];
  if (logprobs_) out.logprob = work_[static_cast<size_t>(out.token)] - norm;
  return out;
}

}  // namespace kiln::server::generate
