#include "loadtest/generate_driver.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kiln/v1/generate.grpc.pb.h"
#include "kiln/v1/model.grpc.pb.h"
#include "loadtest/report.h"
#include "loadtest/requests.h"

namespace kiln::load {
namespace {

using Clock = std::chrono::steady_clock;

int64_t Ns(Clock::duration d) { return std::chrono::duration_cast<std::chrono::nanoseconds>(d).count(); }

// The model's vocabulary: the last dim of its output `logits`.
absl::StatusOr<int64_t> Vocabulary(const Options& o, const std::shared_ptr<grpc::Channel>& channel) {
  ASSIGN_OR_RETURN(const v1::ModelInfo info, GetReadyModel(o, channel));
  for (const auto& out : info.outputs()) {
    if (out.name() == "logits" && out.shape_size() == 3 && out.shape(2) > 0) return out.shape(2);
  }
  return absl::FailedPreconditionError(absl::StrCat("model '", o.model, "' has no logits output [batch, sequence, vocab]"));
}

// One stream: its figures added to `r`.
void OneCall(v1::GenerationService::Stub& stub, const Options& o, const v1::GenerateRequest& req,
             GenerationResult& r) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + o.timeout);
  const Clock::time_point t0 = Clock::now();
  auto reader = stub.Generate(&ctx, req);
  v1::GenerateResponse m;
  Clock::time_point last = t0;
  std::vector<int64_t> itl;
  int64_t ttft = -1, tokens = 0;
  while (reader->Read(&m)) {
    const Clock::time_point now = Clock::now();
    const int n = m.output_ids_size();
    if (n == 0) continue;
    if (ttft < 0) {
      ttft = Ns(now - t0);
    } else {
      for (int i = 0; i < n; ++i) itl.push_back(Ns(now - last) / n);
    }
    tokens += n;
    last = now;
  }
  const grpc::Status s = reader->Finish();
  RecordCall(r.run, Ns(Clock::now() - t0), s);
  if (!s.ok()) return;
  if (ttft >= 0) r.ttft_ns.push_back(ttft);
  r.itl_ns.insert(r.itl_ns.end(), itl.begin(), itl.end());
  r.tokens += tokens;
}

}  // namespace

absl::StatusOr<GenerationResult> RunGeneration(const Options& o, int64_t total,
                                               std::chrono::nanoseconds duration,
                                               const std::shared_ptr<grpc::Channel>& channel) {
  ASSIGN_OR_RETURN(const int64_t vocab, Vocabulary(o, channel));
  std::atomic<int64_t> next{0};
  std::mutex mu;
  GenerationResult merged;
  const Clock::time_point begin = Clock::now(), end = begin + duration;
  auto worker = [&](int w) {
    auto stub = v1::GenerationService::NewStub(channel);
    std::mt19937_64 rng(static_cast<uint64_t>(w) * 7919 + 1);
    GenerationResult mine;
    for (;;) {
      const int64_t i = next++;
      if (total > 0 ? i >= total : Clock::now() >= end) break;
      v1::GenerateRequest req;
      req.set_model(o.model);
      req.set_max_tokens(o.max_tokens);
      req.set_ignore_eos(true);
      const int64_t len = o.prompt_lens[static_cast<size_t>(i) % o.prompt_lens.size()];
      for (int64_t k = 0; k < len; ++k) req.add_input_ids(static_cast<int64_t>(rng() % static_cast<uint64_t>(vocab)));
      OneCall(*stub, o, req, mine);
    }
    std::lock_guard<std::mutex> lk(mu);
    MergeInto(merged.run, mine.run);
    merged.ttft_ns.insert(merged.ttft_ns.end(), mine.ttft_ns.begin(), mine.ttft_ns.end());
    merged.itl_ns.insert(merged.itl_ns.end(), mine.itl_ns.begin(), mine.itl_ns.end());
    merged.tokens += mine.tokens;
  };
  std::vector<std::thread> threads;
  for (int w = 0; w < o.concurrency; ++w) threads.emplace_back(worker, w);
  for (auto& t : threads) t.join();
  merged.run.total = Clock::now() - begin;
  return merged;
}

void FinalizeGeneration(GenerationResult& r) {
  Finalize(r.run);
  std::sort(r.ttft_ns.begin(), r.ttft_ns.end());
  std::sort(r.itl_ns.begin(), r.itl_ns.end());
}

std::string GenerationText(const GenerationResult& r) {
  const double secs = std::chrono::duration<double>(r.run.total).count();
  std::string out = absl::StrFormat("tokens   %d (%.1f tokens/s)\n", r.tokens, secs > 0 ? r.tokens / secs : 0.0);
  for (const auto& [name, v] : {std::pair{"time to first token", &r.ttft_ns}, std::pair{"inter-token", &r.itl_ns}}) {
    out += absl::StrFormat("%s: p50 %.2f ms  p90 %.2f ms  p99 %.2f ms\n", name, Percentile(*v, 50) / 1e6,
                           Percentile(*v, 90) / 1e6, Percentile(*v, 99) / 1e6);
  }
  return out;
}

void WriteGeneration(json::Writer& w, const GenerationResult& r) {
  const double secs = std::chrono::duration<double>(r.run.total).count();
  w.BeginObject().Field("tokens", static_cast<int64_t>(r.tokens));
  w.Field("tokensPerSecond", secs > 0 ? r.tokens / secs : 0.0);
  for (const auto& [name, v] :
       {std::pair{"timeToFirstToken", &r.ttft_ns}, std::pair{"interToken", &r.itl_ns}}) {
    w.Key(name).BeginObject().Field("p50", Percentile(*v, 50)).Field("p90", Percentile(*v, 90));
    w.Field("p99", Percentile(*v, 99)).Field("count", static_cast<int64_t>(v->size()));
    w.EndObject();
  }
  w.EndObject();
}

std::string GenerationJson(const GenerationResult& r) {
  json::Writer w(json::NonFinite::kNull);
  WriteGeneration(w, r);
  return w.Take();
}

}  // namespace kiln::load
