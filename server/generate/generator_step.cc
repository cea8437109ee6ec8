// The generation loop's steps (server/generate/generator.h): one engine run over a group of
// sequences, its cache stored, its rows' next tokens sampled. Steps of one iteration run side
// by side on the loop's lanes (step_lanes.h): a step touches only its own sequences, its
// group's buffers and its lane's memory, and leaves what changes the scheduler's state
// (ending a sequence, registering its pages) to StepEffects.
#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "server/generate/generator.h"
#include "server/generate/generator_sequence.h"
#include "server/generate/step.h"

namespace kiln::server::generate {
namespace {

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

bool EndsWith(const std::vector<int64_t>& tokens, const std::vector<int64_t>& tail) {
  return !tail.empty() && tail.size() <= tokens.size() &&
         std::equal(tail.rbegin(), tail.rend(), tokens.rbegin());
}

}  // namespace

void Generator::RunStep(const std::vector<SeqPtr>& group, int64_t count, int64_t ordinal, int lane,
                        StepEffects& effects) {
  std::vector<StepRow> rows;
  int64_t longest = 0;
  for (const SeqPtr& s : group) {
    rows.push_back({&s->tokens, s->cached, &s->table, s->id});
    longest = std::max(longest, s->cached);
  }
  const int64_t past = setup_.exact ? longest : setup_.past_size(longest);
  const auto n = static_cast<int64_t>(group.size());
  const StepKind kind = KindOf(count, n);
  const int64_t total = kind.rows;
  const int64_t positions = kind.logit_positions(count);
  StepBuffers& buffers = buffers_.For(total, kind.width, past, ordinal, lane);
  auto run = [&]() -> absl::StatusOr<std::vector<Tensor>> {
    ASSIGN_OR_RETURN(std::vector<Tensor> out, StepOnce(rows, count, past, kind, buffers));
    const Tensor& logits = out.at(setup_.contract.logits);
    if (logits.rank() != 3 || logits.dim(0) != total || logits.dim(1) != positions ||
        logits.dim(2) != setup_.contract.vocab || logits.dtype() != DType::kFloat32) {
      return absl::InternalError(absl::StrCat("the step's logits are ",
                                              ShapeToString(logits.shape()), ", not [", total, ", ",
                                              positions, ", ", setup_.contract.vocab, "]"));
    }
    return out;
  };
  absl::StatusOr<std::vector<Tensor>> out = WithinBudget(ProcessMemory(), run);
  if (out.status().code() == absl::StatusCode::kResourceExhausted && buffers_.spare().bytes() > 0) {
    // Memory kept for reuse goes before a step fails for lack of it. The failed build may
    // have replaced some of the group's tensors: its rows are brought in whole again.
    buffers_.spare().Clear();
    buffers.held = {};
    out = WithinBudget(ProcessMemory(), run);
  }
  if (!out.ok()) {
    for (const SeqPtr& s : group) effects.ended.push_back({s, out.status(), ""});
    return;
  }
  const Tensor& logits = (*out)[setup_.contract.logits];
  const int64_t vocab = setup_.contract.vocab;
  for (int64_t r = 0; r < n; ++r) {
    Sequence& s = *group[static_cast<size_t>(r)];
    s.cached += count;
    effects.computed.push_back(group[static_cast<size_t>(r)]);
    if (s.pending() == 0) Sample(s, logits.data<float>() + ((r + 1) * positions - 1) * vocab);
  }
  for (const SeqPtr& s : group) {
    if (s->stopped || s->generated >= s->limit) {
      effects.ended.push_back({s, absl::OkStatus(), s->stopped ? "stop" : "length"});
    }
  }
}

Generator::StepKind Generator::KindOf(int64_t count, int64_t rows) const {
  // A short chunk runs padded on the last-position engines when they keep its last real
  // position (and can append in place where the other steps do).
  const bool padded = setup_.step_last && setup_.last_from >= 2 && count >= setup_.last_from &&
                      count < setup_.last_count &&
                      (!setup_.step_appending || setup_.step_last_appending);
  StepKind kind;
  kind.width = padded ? setup_.last_count : count;
  kind.rows = rows;
  // An appending step runs at a batch bucket (the engine's own outputs are the cache).
  const auto& counts = setup_.append_counts;
  kind.appending =
      setup_.step_appending && std::find(counts.begin(), counts.end(), kind.width) != counts.end();
  if (kind.appending) {
    auto b = std::lower_bound(setup_.buckets.begin(), setup_.buckets.end(), rows);
    kind.appending = b != setup_.buckets.end();
    if (kind.appending) kind.rows = *b;
  }
  // Always so when padded (which asked for step_last_appending where appending).
  kind.last = setup_.step_last && kind.width == setup_.last_count &&
              (!kind.appending || setup_.step_last_appending);
  return kind;
}

absl::StatusOr<std::vector<Tensor>> Generator::StepOnce(const std::vector<StepRow>& rows,
                                                        int64_t count, int64_t past, StepKind kind,
                                                        StepBuffers& buffers) {
  const int64_t total = kind.rows;  // the rows its buffers were made for
  std::vector<Tensor> out;
  if (kind.appending) {
    const absl::Status built = BuildAppendingStep(
        setup_.contract, setup_.signature, *cache_, rows, total, count, kind.logit_positions(count),
        past, buffers.in, buffers.out, buffers.held, &buffers_.spare(), kind.width);
    RETURN_IF_ERROR(built);
    const StepFn& step = kind.last ? setup_.step_last_appending : setup_.step_appending;
    absl::StatusOr<std::vector<Tensor>> ran = step(buffers.in, total, std::move(buffers.out));
    if (!ran.ok()) {
      buffers.held = {};  // the presents are gone with the failed run
      return ran.status();
    }
    out = std::move(*ran);
    std::lock_guard<std::mutex> lk(mu_);
    ++stats_.steps_in_place;
  } else {
    RETURN_IF_ERROR(BuildStepInputs(setup_.contract, setup_.signature, *cache_, rows, count, past,
                                    buffers.in, kind.width));
    const StepFn& step = kind.last ? setup_.step_last : setup_.step;
    ASSIGN_OR_RETURN(out, step(buffers.in, total, std::move(buffers.out)));
    std::lock_guard<std::mutex> lk(mu_);
    ++stats_.steps_copied;
  }
  if (kind.last) {
    std::lock_guard<std::mutex> lk(mu_);
    ++stats_.steps_last_position;
    if (kind.width > count) ++stats_.steps_last_padded;
  }
  buffers.out = out;  // written over (appending: appended to) by the next step of this shape
  RETURN_IF_ERROR(StoreStep(setup_.contract, *cache_, rows, count, past, out, kind.width));
  return out;
}

void Generator::Sample(Sequence& seq, const float* logits) {
  const Sampled x = seq.sampler.Next(logits, setup_.contract.vocab, seq.counts);
  seq.tokens.push_back(x.token);
  ++seq.counts[x.token];
  ++seq.generated;
  const Clock::time_point now = Clock::now();
  if (seq.generated == 1) {
    if (setup_.hooks.first_token) setup_.hooks.first_token(Seconds(now - seq.submitted));
  } else if (setup_.hooks.inter_token) {
    setup_.hooks.inter_token(Seconds(now - seq.last_token));
  }
  seq.last_token = now;
  if (setup_.hooks.generated) setup_.hooks.generated(1);
  {
    std::lock_guard<std::mutex> lk(mu_);
    ++stats_.tokens;
  }
  seq.stream->Push({x.token, x.logprob});
  const auto& stops = seq.params.stop_token_ids;
  bool stop = std::find(stops.begin(), stops.end(), x.token) != stops.end();
  if (!seq.params.ignore_eos) stop |= std::find(eos_.begin(), eos_.end(), x.token) != eos_.end();
  for (const auto& s : seq.params.stop_sequences) stop |= EndsWith(seq.tokens, s);
  seq.stopped = stop;  // ended by RunStep, which holds the shared pointer
}

}  // namespace kiln::server::generate
