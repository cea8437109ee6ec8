// What a generator's setup and a request must satisfy (declared in generator.h).
#include "absl/strings/str_cat.h"
#include "server/generate/generator.h"

namespace kiln::server::generate {

absl::Status ValidateGeneratorSetup(const GeneratorSetup& setup) {
  RETURN_IF_ERROR(ValidateGenerationConfig(setup.config));
  if (setup.min_step > 1 || setup.max_step < 1 || setup.max_context < 2) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the model's '", setup.contract.sequence_symbol, "' range must admit one token and '",
        setup.contract.past_symbol, "' at least one cached position"));
  }
  if (!setup.contract.has_mask() && !setup.exact) {
    return absl::FailedPreconditionError(
        "a decoder without an attention mask cannot be padded: its steps must run at exact "
        "lengths");
  }
  if (setup.exact && (setup.step_appending || setup.step_last)) {
    // Both run at padded shapes kept between steps (appending) or built per class (last).
    return absl::FailedPreconditionError("steps at exact lengths run through `step` only");
  }
  if (setup.last_from != 0 && (!setup.step_last || !setup.contract.has_mask() ||
                               setup.last_from < 2 || setup.last_from >= setup.last_count)) {
    return absl::FailedPreconditionError(
        absl::StrCat("short chunks padded to the last-position engines (from ", setup.last_from,
                     " tokens) need those engines, a mask and 2 <= from < ", setup.last_count));
  }
  if (!setup.exact && !setup.past_size) {
    return absl::FailedPreconditionError("padded steps need the past's classes (past_size)");
  }
  if (setup.lanes < 1 || setup.lanes > 64) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the loop's lanes (the model's instances) must be in 1..64, not ", setup.lanes));
  }
  return absl::OkStatus();
}

absl::Status CheckGenerateParams(const GeneratorSetup& setup, const GenerateParams& p) {
  const int64_t n = static_cast<int64_t>(p.prompt.size());
  if (n == 0) return absl::InvalidArgumentError("the prompt has no tokens");
  for (size_t i = 0; i < p.prompt.size(); ++i) {
    if (p.prompt[i] < 0 || p.prompt[i] >= setup.contract.vocab) {
      return absl::InvalidArgumentError(absl::StrCat("prompt token ", i, " is ", p.prompt[i],
                                                     "; the vocabulary is [0, ",
                                                     setup.contract.vocab, ")"));
    }
  }
  if (n >= setup.max_context) {
    return absl::InvalidArgumentError(absl::StrCat("the prompt has ", n,
                                                   " tokens; the model's context holds ",
                                                   setup.max_context, " with the output"));
  }
  if (p.max_tokens < 1 || p.max_tokens > setup.config.max_new_tokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_tokens is ", p.max_tokens, "; it must be in [1, ", setup.config.max_new_tokens, "]"));
  }
  for (const auto& s : p.stop_sequences) {
    if (s.empty()) return absl::InvalidArgumentError("a stop sequence is empty");
  }
  return ValidateSampling(p.sampling);
}

}  // namespace kiln::server::generate
