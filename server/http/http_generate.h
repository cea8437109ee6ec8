// The KServe v2 generate extension (as Triton has it) on the HTTP port, with token ids, or
// text when the model ships a SentencePiece tokenizer (server/generate/tokenizer.h):
//   POST /v2/models/{m}[/versions/{v}]/generate         one JSON answer with every token
//   POST /v2/models/{m}[/versions/{v}]/generate_stream  Server-Sent Events, one per step
// Body: {"input_ids": [ids...] or "text_input": "...", "parameters": {"max_tokens": 16,
// "temperature": 0, "top_k", "top_p", "repetition_penalty", "frequency_penalty",
// "presence_penalty", "seed", "stop_token_ids": [...], "stop_sequences": [[...]], "ignore_eos",
// "logprobs"}}. Answer: {"model_name", "model_version", "output_ids": [...], "text_output"? (with a
// tokenizer; in the stream each event's new text), "logprobs"?: [...],
// "finish_reason", "prompt_tokens", "generated_tokens"}; each event of the stream is
// `data: {...}` with the step's output_ids, the last with finish_reason, or `data: {"error":
// ...}` when the request fails once streaming. Errors before the first token are answered
// with their HTTP status, as every /v2 route does.
#pragma once

#include <httplib.h>

#include <optional>
#include <string>

#include "base/json.h"
#include "base/status.h"
#include "server/generate/generator.h"
#include "server/serving/model_registry.h"

namespace kiln::server {

// A request's body: its parameters, and the prompt as text when it came as text_input
// (params.prompt is then empty until the tokenizer encodes it).
struct GenerateBody {
  generate::GenerateParams params;
  std::optional<std::string> text;
};

// The request's parameters from its JSON body; INVALID_ARGUMENT naming a bad or unknown key,
// or a body with both or neither of input_ids and text_input.
absl::StatusOr<GenerateBody> ParseGenerateBody(std::string_view body, const json::Limits& limits);

// Registers both routes; before the /v2 catch-all. `registry` must outlive `router`.
void AddGenerateRoutes(httplib::Server& router, ModelRegistry& registry,
                       const json::Limits& limits);

}  // namespace kiln::server
