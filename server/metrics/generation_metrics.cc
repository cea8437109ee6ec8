#include "server/metrics/generation_metrics.h"

#include "server/metrics/kiln_metrics.h"

namespace kiln::server::metrics {
namespace {

// Prefill of a long prompt takes up to seconds; a decode step milliseconds.
std::vector<double> TokenBuckets() {
  return {1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
}

struct GenerationFamilies {
  prometheus::Family<Histogram>& ttft = prometheus::BuildHistogram()
      .Name("kiln_generation_time_to_first_token_seconds")
      .Help("From a generation request's arrival to its first token.")
      .Register(Default());
  prometheus::Family<Histogram>& itl = prometheus::BuildHistogram()
      .Name("kiln_generation_inter_token_seconds")
      .Help("Between two tokens of one generation request.")
      .Register(Default());
  prometheus::Family<Counter>& tokens = prometheus::BuildCounter()
      .Name("kiln_generation_tokens_total")
      .Help("Tokens generated.")
      .Register(Default());
  prometheus::Family<Counter>& preemptions = prometheus::BuildCounter()
      .Name("kiln_generation_preemptions_total")
      .Help("Sequences preempted (pages freed, recomputed later) because the kv cache was full.")
      .Register(Default());
};

GenerationFamilies& G() {
  static auto* g = new GenerationFamilies();  // never destroyed: used by detached threads
  return *g;
}

}  // namespace

generate::GenerationHooks GenerationHooksFor(const std::string& model) {
  const prometheus::Labels labels{{"model", model}};
  Histogram* ttft = &G().ttft.Add(labels, TokenBuckets());
  Histogram* itl = &G().itl.Add(labels, TokenBuckets());
  Counter* tokens = &G().tokens.Add(labels);
  Counter* preempted = &G().preemptions.Add(labels);
  generate::GenerationHooks h;
  h.first_token = [ttft](double s) { ttft->Observe(s); };
  h.inter_token = [itl](double s) { itl->Observe(s); };
  h.generated = [tokens](int64_t n) { tokens->Increment(static_cast<double>(n)); };
  h.preempted = [preempted] { preempted->Increment(); };
  return h;
}

}  // namespace kiln::server::metrics
