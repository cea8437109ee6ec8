// What the generation entry points share once their transport has decoded the request
// (kiln.v1 Generate/GenerateOnce over gRPC, the KServe v2 generate extension over REST):
// finding the version's generation loop, and relaying its stream to the client with the
// client's cancel and deadline seen while it runs. Protocol-neutral, like
// server/serving/inference.h.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "server/generate/generator.h"
#include "server/serving/model_registry.h"

namespace kiln::server {

struct FoundGenerator {
  std::shared_ptr<ModelVersion> version;  // held for the request's life
  generate::Generator* generator = nullptr;
};

// The READY version's generation loop; FAILED_PRECONDITION saying why when the model does
// not generate (not a decoder, generation off, no shape classes).
absl::StatusOr<FoundGenerator> FindGenerator(const ModelRegistry& registry, const std::string& name,
                                             std::optional<int64_t> version);

// Hands each chunk of `stream` to `emit` as it comes (false from `emit`: the client is gone)
// until the request is over, polling `client_gone` (null: never) meanwhile; a gone client
// cancels the request. The final chunk (done) is also passed to `emit`, with or without
// tokens. Its status is the request's: OK, or why it failed (CANCELLED when the client went).
absl::Status RelayStream(generate::GenerationStream& stream,
                         const std::function<bool(const generate::StreamChunk&)>& emit,
                         const std::function<bool()>& client_gone);

// The prompt of a request that came as text: the version's tokenizer's ids for it;
// INVALID_ARGUMENT when the model ships no tokenizer (tokenizer.model in its folder).
absl::Status EncodePrompt(const FoundGenerator& f, const std::string& text,
                          std::vector<int64_t>& prompt);

// The text of the tokens generated so far, handed out as it grows: each chunk gets what its
// tokens added. A piece's text depends on the piece before it (SentencePiece drops the
// leading space of the first piece it decodes), so the new ids are decoded together with
// the previous chunk's and measured against that chunk's own text: a window of two chunks,
// not the whole generation, per message. Text that ends inside a character (byte pieces of
// one UTF-8 character split across chunks) is held back until the character is whole or the
// generation ends. Without a tokenizer there is no text; ids beyond the tokenizer's
// vocabulary (a model's padded embedding rows) have none.
class TextStream {
 public:
  explicit TextStream(const generate::Tokenizer* tokenizer) : tokenizer_(tokenizer) {}
  // The text `c`'s tokens add; nullopt without a tokenizer.
  std::optional<std::string> Next(const generate::StreamChunk& c);

 private:
  const generate::Tokenizer* tokenizer_;
  std::vector<int64_t> ids_;
  size_t prefix_ = 0;  // the window's first id: the start of the last chunk sent
  size_t read_ = 0;    // the ids whose text has been sent
};

}  // namespace kiln::server
