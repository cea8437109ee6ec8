#include "server/http/http_generate.h"

#include <memory>

#include "server/http/http_connection.h"
#include "server/http/http_kserve.h"
#include "server/serving/generation_api.h"
#include "server/serving/inference.h"

namespace kiln::server {
namespace {

using generate::GenerateParams;

absl::StatusOr<std::vector<int64_t>> IdList(const json::Value& v, const std::string& what) {
  if (!v.is_array())
    return absl::InvalidArgumentError(absl::StrCat("'", what, "' must be an array of token ids"));
  std::vector<int64_t> ids;
  for (size_t i = 0; i < v.items().size(); ++i) {
    ASSIGN_OR_RETURN(int64_t id, json::AsInt64(v.items()[i], absl::StrCat(what, "[", i, "]")));
    ids.push_back(id);
  }
  return ids;
}

absl::StatusOr<bool> Boolean(const json::Value& v, const std::string& what) {
  if (v.kind() != json::Kind::kBool)
    return absl::InvalidArgumentError(absl::StrCat("'", what, "' must be true or false"));
  return v.boolean();
}

// One key of "parameters".
absl::Status ApplyParameter(const std::string& key, const json::Value& v, GenerateParams& p) {
  const std::string what = "parameters." + key;
  if (key == "max_tokens") {
    ASSIGN_OR_RETURN(p.max_tokens, json::AsInt64(v, what));
  } else if (key == "temperature") {
    ASSIGN_OR_RETURN(p.sampling.temperature, json::AsDouble(v, what));
  } else if (key == "top_k") {
    ASSIGN_OR_RETURN(p.sampling.top_k, json::AsInt64(v, what));
  } else if (key == "top_p") {
    ASSIGN_OR_RETURN(p.sampling.top_p, json::AsDouble(v, what));
  } else if (key == "repetition_penalty") {
    ASSIGN_OR_RETURN(p.sampling.repetition_penalty, json::AsDouble(v, what));
  } else if (key == "frequency_penalty") {
    ASSIGN_OR_RETURN(p.sampling.frequency_penalty, json::AsDouble(v, what));
  } else if (key == "presence_penalty") {
    ASSIGN_OR_RETURN(p.sampling.presence_penalty, json::AsDouble(v, what));
  } else if (key == "seed") {
    ASSIGN_OR_RETURN(p.sampling.seed, json::AsUInt64(v, what));
  } else if (key == "stop_token_ids") {
    ASSIGN_OR_RETURN(p.stop_token_ids, IdList(v, what));
  } else if (key == "stop_sequences") {
    if (!v.is_array())
      return absl::InvalidArgumentError(
          "'parameters.stop_sequences' must be an array of id arrays");
    for (size_t i = 0; i < v.items().size(); ++i) {
      ASSIGN_OR_RETURN(auto ids, IdList(v.items()[i], absl::StrCat(what, "[", i, "]")));
      p.stop_sequences.push_back(std::move(ids));
    }
  } else if (key == "ignore_eos") {
    ASSIGN_OR_RETURN(p.ignore_eos, Boolean(v, what));
  } else if (key == "logprobs") {
    ASSIGN_OR_RETURN(p.logprobs, Boolean(v, what));
  } else {
    return absl::InvalidArgumentError(absl::StrCat("unknown key '", what, "'"));
  }
  return absl::OkStatus();
}

// The JSON of one chunk: the tokens and, when the request is over, how it ended.
std::string ChunkJson(const FoundGenerator& f, const generate::StreamChunk& c, bool logprobs,
                      const std::optional<std::string>& text) {
  json::Writer w;
  w.BeginObject().Key("model_name").String(f.version->name());
  w.Key("model_version").String(std::to_string(f.version->version()));
  w.Key("output_ids").BeginArray();
  for (const auto& t : c.tokens) w.Int(t.id);
  w.EndArray();
  if (text) w.Key("text_output").String(*text);
  if (logprobs) {
    w.Key("logprobs").BeginArray();
    for (const auto& t : c.tokens) w.Double(t.logprob);
    w.EndArray();
  }
  if (c.done && c.status.ok()) {
    w.Key("finish_reason").String(c.finish_reason);
    w.Key("prompt_tokens").Int(c.prompt_tokens);
    w.Key("generated_tokens").Int(c.generated_tokens);
  }
  return w.EndObject().Take();
}

// The request's generation, submitted; the version and the stream are held by the caller.
absl::StatusOr<std::pair<FoundGenerator, std::shared_ptr<generate::GenerationStream>>> Start(
    ModelRegistry& registry, const json::Limits& limits, const httplib::Request& req,
    GenerateParams& params) {
  const std::string version_text = req.matches.size() > 2 ? req.matches[2].str() : "";
  ASSIGN_OR_RETURN(std::optional<int64_t> version, ParseVersion(version_text));
  ASSIGN_OR_RETURN(FoundGenerator f, FindGenerator(registry, req.matches[1].str(), version));
  ASSIGN_OR_RETURN(GenerateBody body, ParseGenerateBody(req.body, limits));
  params = std::move(body.params);
  if (body.text) RETURN_IF_ERROR(EncodePrompt(f, *body.text, params.prompt));
  ASSIGN_OR_RETURN(auto stream, f.generator->Submit(params));
  return std::make_pair(std::move(f), std::move(stream));
}

void GenerateRoute(ModelRegistry& registry, const json::Limits& limits, const httplib::Request& req,
                   httplib::Response& res) {
  RequestRecorder record(registry, "generate");
  GenerateParams params;
  std::string body;
  auto run = [&]() -> absl::Status {
    ASSIGN_OR_RETURN(auto started, Start(registry, limits, req, params));
    record.Reached(started.first.version);
    generate::StreamChunk all;
    RETURN_IF_ERROR(RelayStream(
        *started.second,
        [&](const generate::StreamChunk& c) {
          all.tokens.insert(all.tokens.end(), c.tokens.begin(), c.tokens.end());
          if (c.done) {
            all.done = true;
            all.finish_reason = c.finish_reason;
            all.prompt_tokens = c.prompt_tokens;
            all.generated_tokens = c.generated_tokens;
          }
          return true;
        },
        nullptr));
    TextStream text(started.first.generator->tokenizer());
    body = ChunkJson(started.first, all, params.logprobs, text.Next(all));
    return absl::OkStatus();
  };
  const absl::Status s = record.Finish(req.matches[1].str(), run());
  if (!s.ok()) return SendError(res, s);
  res.set_content(body, "application/json");
}

// Writes the event stream on the connection itself (server/http/http_connection.h): the head,
// then one chunk per event, each `data: {...}` and a blank line.
void GenerateStreamRoute(ModelRegistry& registry, const json::Limits& limits,
                         const httplib::Request& req, httplib::Response& res) {
  RequestRecorder record(registry, "generate_stream");
  const std::string model = req.matches[1].str();
  HttpConnection* conn = CurrentHttpConnection();
  if (conn == nullptr) {
    return SendError(res, record.Finish(model, absl::InternalError("no connection to stream on")));
  }
  GenerateParams params;
  auto started = Start(registry, limits, req, params);
  if (!started.ok()) return SendError(res, record.Finish(model, started.status()));
  record.Reached(started->first.version);
  conn->TakeOver();
  TextStream text(started->first.generator->tokenizer());
  auto chunk = [](const std::string& event) {
    return absl::StrCat(absl::Hex(event.size()), "\r\n", event, "\r\n");
  };
  absl::Status s = absl::CancelledError("the client went away");
  if (conn->Write("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                  "Cache-Control: no-cache\r\nConnection: close\r\n"
                  "Transfer-Encoding: chunked\r\n\r\n")) {
    s = RelayStream(
        *started->second,
        [&](const generate::StreamChunk& c) {
          const std::string data =
              c.done && !c.status.ok()
                  ? ErrorBody(c.status)
                  : ChunkJson(started->first, c, params.logprobs, text.Next(c));
          return conn->Write(chunk(absl::StrCat("data: ", data, "\n\n")));
        },
        nullptr);
    if (s.ok() || s.code() != absl::StatusCode::kCancelled) conn->Write("0\r\n\r\n");
  } else {
    started->second->Cancel();
  }
  (void)record.Finish(model, s);
}

}  // namespace

absl::StatusOr<GenerateBody> ParseGenerateBody(std::string_view body, const json::Limits& limits) {
  ASSIGN_OR_RETURN(json::Value root, json::Parse(body, limits));
  if (!root.is_object()) return absl::InvalidArgumentError("the body must be a JSON object");
  GenerateBody out;
  GenerateParams& p = out.params;
  bool have_ids = false;
  for (const auto& [key, v] : root.members()) {
    if (key == "input_ids") {
      ASSIGN_OR_RETURN(p.prompt, IdList(v, "input_ids"));
      have_ids = true;
    } else if (key == "parameters") {
      if (!v.is_object()) return absl::InvalidArgumentError("'parameters' must be an object");
      for (const auto& [pk, pv] : v.members()) RETURN_IF_ERROR(ApplyParameter(pk, pv, p));
    } else if (key == "text_input") {
      if (v.kind() != json::Kind::kString) {
        return absl::InvalidArgumentError("'text_input' must be a string");
      }
      out.text = v.text();
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown key '", key, "'"));
    }
  }
  if (have_ids && out.text) {
    return absl::InvalidArgumentError("give one of 'input_ids' and 'text_input', not both");
  }
  if (!have_ids && !out.text) {
    return absl::InvalidArgumentError("the body has no 'input_ids' (or 'text_input')");
  }
  return out;
}

void AddGenerateRoutes(httplib::Server& router, ModelRegistry& registry,
                       const json::Limits& limits) {
  const std::string model = R"(/v2/models/([^/]+)(?:/versions/([^/]+))?)";
  router.Post(model + "/generate",
              [&registry, limits](const httplib::Request& req, httplib::Response& res) {
                GenerateRoute(registry, limits, req, res);
              });
  router.Post(model + "/generate_stream",
              [&registry, limits](const httplib::Request& req, httplib::Response& res) {
                GenerateStreamRoute(registry, limits, req, res);
              });
}

}  // namespace kiln::server
