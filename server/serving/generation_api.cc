#include "server/serving/generation_api.h"

#include <chrono>

#include "server/serving/inference.h"

namespace kiln::server {

absl::StatusOr<FoundGenerator> FindGenerator(const ModelRegistry& registry, const std::string& name,
                                             std::optional<int64_t> version) {
  FoundGenerator f;
  ASSIGN_OR_RETURN(f.version, FindReady(registry, name, version));
  f.generator = f.version->generator();
  if (f.generator == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "model '", f.version->name(), "' does not generate: ", f.version->generation_refused()));
  }
  return f;
}

absl::Status RelayStream(generate::GenerationStream& stream,
                         const std::function<bool(const generate::StreamChunk&)>& emit,
                         const std::function<bool()>& client_gone) {
  // How often a client's cancel is noticed while no token comes.
  constexpr auto kPoll = std::chrono::milliseconds(50);
  for (;;) {
    generate::StreamChunk c = stream.Take(generate::Clock::now() + kPoll);
    if (client_gone && client_gone()) {
      stream.Cancel();
      return absl::CancelledError("the client cancelled the generation");
    }
    if (c.tokens.empty() && !c.done) continue;
    if (!emit(c)) {
      stream.Cancel();
      return absl::CancelledError("the client went away during the generation");
    }
    if (c.done) return c.status;
  }
}

}  // namespace kiln::server
