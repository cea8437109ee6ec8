#include "server/grpc/grpc_generate.h"

#include "server/grpc/grpc_services.h"
#include "server/serving/generation_api.h"
#include "server/serving/inference.h"

namespace kiln::server {
namespace {

void Append(const generate::StreamChunk& c, bool logprobs, const std::optional<std::string>& text,
            v1::GenerateResponse* r) {
  if (text) r->mutable_text_output()->append(*text);
  for (const generate::GeneratedToken& t : c.tokens) {
    r->add_output_ids(t.id);
    if (logprobs) r->add_logprobs(static_cast<float>(t.logprob));
  }
  if (c.done && c.status.ok()) {
    r->set_finish_reason(c.finish_reason);
    r->set_prompt_tokens(c.prompt_tokens);
    r->set_generated_tokens(c.generated_tokens);
  }
}

}  // namespace

generate::GenerateParams ParamsFromProto(const v1::GenerateRequest& req) {
  // A proto field left at 0 keeps GenerateParams' default (the REST body's absent key).
  generate::GenerateParams p;
  p.prompt.assign(req.input_ids().begin(), req.input_ids().end());
  if (req.max_tokens() != 0) p.max_tokens = req.max_tokens();
  p.sampling.temperature = req.temperature();
  p.sampling.top_k = req.top_k();
  if (req.top_p() != 0) p.sampling.top_p = req.top_p();
  if (req.repetition_penalty() != 0) p.sampling.repetition_penalty = req.repetition_penalty();
  p.sampling.frequency_penalty = req.frequency_penalty();
  p.sampling.presence_penalty = req.presence_penalty();
  if (req.has_seed()) p.sampling.seed = req.seed().value();
  p.stop_token_ids.assign(req.stop_token_ids().begin(), req.stop_token_ids().end());
  p.ignore_eos = req.ignore_eos();
  for (const v1::TokenIds& s : req.stop_sequences()) {
    p.stop_sequences.emplace_back(s.ids().begin(), s.ids().end());
  }
  p.logprobs = req.logprobs();
  return p;
}

absl::Status GenerationServiceImpl::Run(
    grpc::ServerContext& ctx, const v1::GenerateRequest& req, const char* method,
    const std::function<bool(const std::string&, int64_t, const generate::StreamChunk&,
                             const std::optional<std::string>&)>& emit) {
  RequestRecorder record(registry_, method);
  auto run = [&]() -> absl::Status {
    ASSIGN_OR_RETURN(FoundGenerator found,
                     FindGenerator(registry_, req.model(), VersionOf(req.version())));
    record.Reached(found.version);
    generate::GenerateParams params = ParamsFromProto(req);
    if (!req.text_input().empty()) {
      if (!req.input_ids().empty()) {
        return absl::InvalidArgumentError("give one of input_ids and text_input, not both");
      }
      RETURN_IF_ERROR(EncodePrompt(found, req.text_input(), params.prompt));
    }
    params.deadline = DeadlineOf(ctx);
    ASSIGN_OR_RETURN(auto stream, found.generator->Submit(std::move(params)));
    const std::string& model = found.version->name();
    const int64_t v = found.version->version();
    TextStream text(found.generator->tokenizer());
    return RelayStream(
        *stream, [&](const generate::StreamChunk& c) { return emit(model, v, c, text.Next(c)); },
        [&ctx] { return ctx.IsCancelled(); });
  };
  return record.Finish(req.model(), run());
}

grpc::Status GenerationServiceImpl::Generate(grpc::ServerContext* ctx,
                                             const v1::GenerateRequest* req,
                                             grpc::ServerWriter<v1::GenerateResponse>* writer) {
  return ToGrpcStatus(
      Run(*ctx, *req, "Generate",
          [&](const std::string& model, int64_t version, const generate::StreamChunk& c,
              const std::optional<std::string>& text) {
            if (c.done && !c.status.ok() && c.tokens.empty()) return true;
            v1::GenerateResponse r;
            r.set_model(model);
            r.set_version(version);
            Append(c, req->logprobs(), text, &r);
            return writer->Write(r);
          }));
}

grpc::Status GenerationServiceImpl::GenerateOnce(grpc::ServerContext* ctx,
                                                 const v1::GenerateRequest* req,
                                                 v1::GenerateResponse* resp) {
  return ToGrpcStatus(
      Run(*ctx, *req, "GenerateOnce",
          [&](const std::string& model, int64_t version, const generate::StreamChunk& c,
              const std::optional<std::string>& text) {
            resp->set_model(model);
            resp->set_version(version);
            Append(c, req->logprobs(), text, resp);
            return true;
          }));
}

}  // namespace kiln::server
