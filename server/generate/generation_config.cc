#include "server/generate/generation_config.h"

#include "absl/strings/str_cat.h"

namespace kiln::server::generate {

absl::Status ValidateGenerationConfig(const GenerationConfig& c) {
  auto bad = [](const char* key, const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("'generation.", key, "': ", why));
  };
  if (c.mode != "auto" && c.mode != "off") {
    return bad("mode", absl::StrCat("'", c.mode, "' is not one of: auto, off"));
  }
  if (c.kv_in_place != "auto" && c.kv_in_place != "off") {
    return bad("kv_in_place", absl::StrCat("'", c.kv_in_place, "' is not one of: auto, off"));
  }
  if (c.cache_mask != "auto" && c.cache_mask != "off") {
    return bad("cache_mask", absl::StrCat("'", c.cache_mask, "' is not one of: auto, off"));
  }
  if (c.prefill_logits != "last" && c.prefill_logits != "all") {
    return bad("prefill_logits", absl::StrCat("'", c.prefill_logits, "' is not one of: last, all"));
  }
  if (c.max_sequences < 1 || c.max_sequences > 4096) return bad("max_sequences", "must be in 1..4096");
  if (c.kv_cache_bytes < 1) return bad("kv_cache_bytes", "must be >= 1");
  if (c.page_tokens < 1 || c.page_tokens > 4096) return bad("page_tokens", "must be in 1..4096");
  if (c.prefill_chunk < 1) return bad("prefill_chunk", "must be >= 1");
  if (c.prefill_budget < 1) return bad("prefill_budget", "must be >= 1");
  if (c.max_new_tokens < 1) return bad("max_new_tokens", "must be >= 1");
  if (c.keep_step_memory_ms < 0 || c.keep_step_memory_ms > 3600000) {
    return bad("keep_step_memory_ms", "must be in 0..3600000");
  }
  return absl::OkStatus();
}

}  // namespace kiln::server::generate
