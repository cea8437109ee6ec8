#include "server/serving/scrape_metrics.h"

#include "base/memory_budget.h"
#include "server/metrics/kiln_metrics.h"
#include "server/metrics/labeled.h"

namespace kiln::server::metrics {
namespace {

// kiln_models{state}, kiln_engine_arena_bytes{model,device,batch} and
// kiln_process_resident_memory_bytes, from the registry as it is now.
std::string RenderScrapeGauges(const ModelRegistry& registry) {
  prometheus::Registry r;
  Labeled<Gauge> models = AddGauge(r, "kiln_models", "Loaded model versions, by state.", {"state"});
  Labeled<Gauge> arena = AddGauge(r, "kiln_engine_arena_bytes",
                                  "Activation arena bytes of READY engines (summed over instances "
                                  "and versions).",
                                  {"model", "device", "batch"});
  AddGauge(r, "kiln_process_resident_memory_bytes", "Resident set size of kilnd (VmRSS).")
      .Get()
      .Set(static_cast<double>(ResidentMemoryBytes()));
  AddGauge(r, "kiln_memory_budget_bytes",
           "The memory budget (server.memory_budget_bytes): what kilnd's tensors may take.")
      .Get()
      .Set(static_cast<double>(ProcessMemory()->cap()));
  AddGauge(r, "kiln_memory_budget_used_bytes",
           "Tensor bytes charged to the memory budget now (weights, builds, requests).")
      .Get()
      .Set(static_cast<double>(ProcessMemory()->used()));
  Labeled<Gauge> sequences =
      AddGauge(r, "kiln_generation_sequences",
               "Generation requests running (in the kv cache) and waiting.", {"model", "state"});
  Labeled<Gauge> pages =
      AddGauge(r, "kiln_kv_cache_pages", "Pages of the generation kv cache, used and free.",
               {"model", "state"});
  for (ModelState s : {ModelState::kLoading, ModelState::kReady, ModelState::kFailed}) {
    models.With({ModelStateName(s)});
  }
  for (const auto& mv : registry.List()) {
    const ModelState state = mv->state();
    models.With({ModelStateName(state)}).Increment();
    if (state != ModelState::kReady) continue;  // built() is only valid once READY
    if (const generate::Generator* g = mv->generator()) {
      const generate::GeneratorStats st = g->stats();
      sequences.With({mv->name(), "running"}).Increment(static_cast<double>(st.running));
      sequences.With({mv->name(), "waiting"}).Increment(static_cast<double>(st.waiting));
      pages.With({mv->name(), "used"})
          .Increment(static_cast<double>(st.pages_total - st.pages_free));
      // Cached: free for a new page, kept until then for a prompt that starts the same way.
      pages.With({mv->name(), "free"})
          .Increment(static_cast<double>(st.pages_free - st.pages_cached));
      pages.With({mv->name(), "cached"}).Increment(static_cast<double>(st.pages_cached));
    }
    for (const auto& [batch, engines] : mv->built().engines) {
      for (const auto& e : engines) {
        arena.With({mv->name(), e->info().device, std::to_string(batch)})
            .Increment(static_cast<double>(e->info().arena_bytes));
      }
    }
  }
  return Serialize(r);
}

}  // namespace

std::string RenderAll(const ModelRegistry& registry) {
  return Serialize(Default()) + RenderScrapeGauges(registry);
}

}  // namespace kiln::server::metrics
