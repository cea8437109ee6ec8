#include "server/serving/generation_api.h"

#include <chrono>
#include <cstddef>
#include <string_view>

#include "absl/strings/str_cat.h"
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

absl::Status EncodePrompt(const FoundGenerator& f, const std::string& text,
                          std::vector<int64_t>& prompt) {
  const generate::Tokenizer* tokenizer = f.generator->tokenizer();
  if (!tokenizer) {
    return absl::InvalidArgumentError(
        absl::StrCat("text input needs a tokenizer, which model '", f.version->name(),
                     "' does not ship (tokenizer.model in its folder); send token ids"));
  }
  ASSIGN_OR_RETURN(prompt, tokenizer->Encode(text));
  return absl::OkStatus();
}

std::optional<std::string> TextStream::Next(const generate::StreamChunk& c) {
  if (!tokenizer_) return std::nullopt;
  for (const auto& t : c.tokens) {
    if (t.id >= 0 && t.id < tokenizer_->vocab_size()) ids_.push_back(t.id);
  }
  const auto from = ids_.begin() + static_cast<std::ptrdiff_t>(prefix_);
  absl::StatusOr<std::string> sent =
      tokenizer_->Decode({from, ids_.begin() + static_cast<std::ptrdiff_t>(read_)});
  absl::StatusOr<std::string> all = tokenizer_->Decode({from, ids_.end()});
  if (!sent.ok() || !all.ok()) return std::string();         // the ids still go out
  constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD: an unfinished character
  const bool unfinished =
      all->size() >= kReplacement.size() &&
      all->compare(all->size() - kReplacement.size(), kReplacement.size(), kReplacement) == 0;
  if ((unfinished && !c.done) || all->size() <= sent->size()) return std::string();
  prefix_ = read_;
  read_ = ids_.size();
  return all->substr(sent->size());
}

}  // namespace kiln::server
