#include "server/generate/generator.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "server/generate/step.h"

namespace kiln::server::generate {

struct Generator::Sequence {
  explicit Sequence(GenerateParams p)
      : params(std::move(p)), sampler(params.sampling, params.logprobs), submitted(Clock::now()) {}
  GenerateParams params;
  uint64_t id = 0;  // unique for the generator's life (HeldRows)
  std::shared_ptr<GenerationStream> stream = std::make_shared<GenerationStream>();
  std::vector<int64_t> tokens;  // prompt, then generated
  int64_t prompt_len = 0;
  int64_t limit = 0;       // tokens it may generate
  int64_t cached = 0;      // positions of `tokens` in its cache
  int64_t generated = 0;
  PageTable table;
  Sampler sampler;
  std::unordered_map<int64_t, int64_t> counts;  // token -> occurrences, for the penalties
  Clock::time_point submitted, last_token;
  bool running = false, ended = false, stopped = false;
  int64_t pending() const { return static_cast<int64_t>(tokens.size()) - cached; }
};

namespace {

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

bool EndsWith(const std::vector<int64_t>& tokens, const std::vector<int64_t>& tail) {
  return !tail.empty() && tail.size() <= tokens.size() &&
         std::equal(tail.rbegin(), tail.rend(), tokens.rbegin());
}

}  // namespace

absl::StatusOr<std::unique_ptr<Generator>> Generator::Create(
    GeneratorSetup setup, std::shared_ptr<MemoryAccount> account) {
  RETURN_IF_ERROR(ValidateGeneratorSetup(setup));
  const GenerationConfig& c = setup.config;
  ASSIGN_OR_RETURN(auto cache, KvCache::Create(setup.contract, c.page_tokens, c.kv_cache_bytes,
                                               std::move(account)));
  std::unique_ptr<Generator> g(new Generator(std::move(setup), std::move(cache)));
  g->thread_ = std::thread([p = g.get()] { p->Loop(); });
  return g;
}

Generator::Generator(GeneratorSetup setup, std::unique_ptr<KvCache> cache)
    : setup_(std::move(setup)), cache_(std::move(cache)), eos_(setup_.config.eos_token_ids) {
  stats_.pages_total = stats_.pages_free = cache_->pages_total();
}

Generator::~Generator() { Stop(); }

absl::StatusOr<std::shared_ptr<GenerationStream>> Generator::Submit(GenerateParams params) {
  RETURN_IF_ERROR(CheckGenerateParams(setup_, params));
  auto seq = std::make_shared<Sequence>(std::move(params));
  seq->tokens = seq->params.prompt;
  seq->prompt_len = static_cast<int64_t>(seq->tokens.size());
  seq->limit = std::min(seq->params.max_tokens, setup_.max_context - seq->prompt_len);
  for (int64_t t : seq->tokens) ++seq->counts[t];
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stopping_) return absl::UnavailableError(stop_reason_);
    if (static_cast<int64_t>(waiting_.size()) >= setup_.config.max_sequences * 16) {
      return absl::ResourceExhaustedError(absl::StrCat(
          waiting_.size(), " generation requests are waiting; try again later"));
    }
    seq->id = next_id_++;
    waiting_.push_back(seq);
    stats_.waiting = static_cast<int64_t>(waiting_.size());
  }
  cv_.notify_all();
  return seq->stream;
}

void Generator::Stop(const std::string& why) {
  std::deque<SeqPtr> waiting;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!stopping_) {
      stopping_ = true;
      stop_reason_ = why;
    }
    waiting.swap(waiting_);
    stats_.waiting = 0;
  }
  cv_.notify_all();
  for (const SeqPtr& s : waiting) s->stream->Finish(absl::UnavailableError(why), "", s->prompt_len);
  if (thread_.joinable()) thread_.join();
}

GeneratorStats Generator::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  return stats_;
}

void Generator::Loop() {
  for (;;) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (stopping_) break;
    }
    if (Iterate()) continue;
    buffers_.Clear();  // idle: hold no step buffers
    std::unique_lock<std::mutex> lk(mu_);
    stats_.step_buffer_bytes = 0;
    cv_.wait(lk, [&] { return stopping_ || !waiting_.empty(); });
  }
  std::string why;
  std::deque<SeqPtr> waiting;  // preempted while Stop took the queue
  {
    std::lock_guard<std::mutex> lk(mu_);
    why = stop_reason_;
    waiting.swap(waiting_);
    stats_.waiting = 0;
  }
  while (!running_.empty()) End(running_.front(), absl::UnavailableError(why), "");
  for (const SeqPtr& s : waiting) End(s, absl::UnavailableError(why), "");
}

bool Generator::Iterate() {
  ReapEnded();
  Admit();
  if (running_.empty()) return false;
  Prefill();
  Decode();
  const int64_t held = buffers_.HeldBytes();
  std::lock_guard<std::mutex> lk(mu_);
  stats_.step_buffer_bytes = held;
  return true;
}

void Generator::ReapEnded() {
  const Clock::time_point now = Clock::now();
  auto verdict = [&](const Sequence& s) -> absl::Status {
    if (s.stream->cancelled()) return absl::CancelledError("the generation was cancelled");
    if (s.params.deadline && now >= *s.params.deadline) {
      return absl::DeadlineExceededError("the generation's deadline passed");
    }
    return absl::OkStatus();
  };
  std::vector<SeqPtr> over;
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      if (!verdict(**it).ok()) {
        over.push_back(*it);
        it = waiting_.erase(it);
      } else {
        ++it;
      }
    }
    stats_.waiting = static_cast<int64_t>(waiting_.size());
  }
  for (const SeqPtr& s : running_) {
    if (!verdict(*s).ok()) over.push_back(s);
  }
  for (const SeqPtr& s : over) End(s, verdict(*s), "");
}

void Generator::Admit() {
  while (static_cast<int64_t>(running_.size()) < setup_.config.max_sequences) {
    SeqPtr s;
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (waiting_.empty()) return;
      s = waiting_.front();
    }
    if (AwaitsSharedPrefix(*s)) return;  // admitted once those pages are computed
    const int64_t need = static_cast<int64_t>(s->tokens.size());
    // The pages another sequence computed for the same leading tokens (never the last
    // prompt token: its logits give the first new token).
    const int64_t shared = setup_.config.prefix_cache
                               ? cache_->SharePrefix(s->tokens, s->prompt_len - 1, s->table)
                               : 0;
    // Headroom of a page per running sequence, so admitting one does not preempt another
    // at the next decode step (which would then be readmitted and preempt again).
    const int64_t headroom = static_cast<int64_t>(running_.size());
    const int64_t own = cache_->PagesFor(need) - static_cast<int64_t>(s->table.pages.size());
    bool placed = own + headroom <= cache_->pages_free() && cache_->Grow(s->table, need);
    if (!placed && running_.empty()) {  // alone: only the whole cache's size can refuse it
      if (cache_->PagesFor(need) > cache_->pages_total()) {
        if (TakeWaiting(s)) {
          End(s, absl::ResourceExhaustedError(absl::StrCat(
                     "the sequence needs ", need, " cached positions; the kv cache holds ",
                     cache_->pages_total() * cache_->page_tokens())),
              "");
        }
        continue;
      }
      placed = cache_->Grow(s->table, need);
    }
    if (!placed || !TakeWaiting(s)) {  // pages free up as sequences end; or Stop took the queue
      cache_->Release(s->table);
      return;
    }
    s->cached = shared;
    s->running = true;
    running_.push_back(s);
    std::lock_guard<std::mutex> lk(mu_);
    stats_.prefix_tokens += shared;
    RecordPool();
  }
}

bool Generator::AwaitsSharedPrefix(const Sequence& s) const {
  if (!setup_.config.prefix_cache) return false;
  const int64_t page = cache_->page_tokens();
  for (const SeqPtr& r : running_) {
    if (r->cached >= r->prompt_len) continue;  // its prompt's pages are all computed
    // The whole pages s could take from r once r has computed them.
    const int64_t most = std::min(s.prompt_len - 1, r->prompt_len);
    int64_t common = 0;
    while (common < most &&
           s.tokens[static_cast<size_t>(common)] == r->tokens[static_cast<size_t>(common)]) {
      ++common;
    }
    if (common / page * page > r->cached) return true;
  }
  return false;
}

void Generator::RecordPool() {
  stats_.running = static_cast<int64_t>(running_.size());
  stats_.pages_free = cache_->pages_free();
  stats_.pages_cached = cache_->pages_cached();
}

bool Generator::TakeWaiting(const SeqPtr& s) {
  std::lock_guard<std::mutex> lk(mu_);
  if (waiting_.empty() || waiting_.front() != s) return false;
  waiting_.pop_front();
  stats_.waiting = static_cast<int64_t>(waiting_.size());
  return true;
}

void Generator::Prefill() {
  int64_t budget = setup_.config.prefill_budget;
  // A copy: a failed step ends (removes) its sequence.
  const std::vector<SeqPtr> order(running_.begin(), running_.end());
  const int64_t chunk = std::min(setup_.config.prefill_chunk, setup_.max_step);
  for (const SeqPtr& s : order) {
    while (budget > 0 && s->running && s->pending() > 1) {
      // The remainder first: every later chunk is whole, so the one a token is sampled
      // from runs on the last-position engines, and the partial one, at the start of the
      // prompt, has the least cache to bring in.
      const int64_t count = s->pending() % chunk == 0 ? chunk : s->pending() % chunk;
      RunStep({s}, count);
      budget -= count;
    }
    if (budget <= 0) return;  // the decodes keep their pace
  }
}

void Generator::Decode() {
  std::vector<SeqPtr> ready;
  for (const SeqPtr& s : running_) {
    if (s->pending() == 1) ready.push_back(s);
  }
  std::vector<SeqPtr> group;
  for (const SeqPtr& s : ready) {
    if (!s->running || !Reserve(s, s->cached + 1)) continue;
    group.push_back(s);
  }
  // Reserving may have preempted members taken before.
  group.erase(std::remove_if(group.begin(), group.end(), [](const SeqPtr& s) { return !s->running; }),
              group.end());
  // Rows of similar lengths run together: a step's past is padded to its longest row (at
  // exact lengths, or when the model's positions follow its first row's length, only rows
  // of one length share a step).
  std::stable_sort(group.begin(), group.end(),
                   [](const SeqPtr& a, const SeqPtr& b) { return a->cached < b->cached; });
  int64_t ordinal = 0;
  for (size_t at = 0, end = 0; at < group.size(); at = end, ++ordinal) {
    const size_t limit = std::min(group.size(), at + static_cast<size_t>(setup_.max_rows));
    end = at + 1;
    const bool one_length = setup_.exact || setup_.rows_share_length;
    while (end < limit && (!one_length || group[end]->cached == group[at]->cached)) ++end;
    RunStep(std::vector<SeqPtr>(group.begin() + static_cast<std::ptrdiff_t>(at),
                                group.begin() + static_cast<std::ptrdiff_t>(end)),
            1, ordinal);
  }
  // Groups beyond this iteration's last hold no rows now.
  buffers_.TrimGroups(static_cast<size_t>(ordinal));
}

bool Generator::Reserve(const SeqPtr& seq, int64_t positions) {
  while (!cache_->Grow(seq->table, positions)) {
    SeqPtr victim;
    for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
      if (*it != seq) {
        victim = *it;
        break;
      }
    }
    if (!victim) {
      End(seq, absl::ResourceExhaustedError(absl::StrCat(
                   "the sequence needs ", positions, " cached positions; the kv cache holds ",
                   cache_->pages_total() * cache_->page_tokens())),
          "");
      return false;
    }
    Preempt(victim);
  }
  return true;
}

void Generator::Preempt(const SeqPtr& victim) {
  cache_->Release(victim->table);
  victim->cached = 0;  // recomputed from its tokens when readmitted
  victim->running = false;
  running_.remove(victim);
  {
    std::lock_guard<std::mutex> lk(mu_);
    waiting_.push_front(victim);
    // Recomputed, its positions come anew: a step's presents holding the old ones are stale.
    victim->id = next_id_++;
    ++stats_.preemptions;
    stats_.waiting = static_cast<int64_t>(waiting_.size());
    RecordPool();
  }
  if (setup_.hooks.preempted) setup_.hooks.preempted();
}

void Generator::RunStep(const std::vector<SeqPtr>& group, int64_t count, int64_t ordinal) {
  std::vector<StepRow> rows;
  int64_t longest = 0;
  for (const SeqPtr& s : group) {
    rows.push_back({&s->tokens, s->cached, &s->table, s->id});
    longest = std::max(longest, s->cached);
  }
  const int64_t past = setup_.exact ? longest : setup_.past_size(longest);
  const auto n = static_cast<int64_t>(group.size());
  // An appending step runs at a batch bucket (the engine's own outputs are the cache).
  int64_t total = n;
  const auto& counts = setup_.append_counts;
  bool appending =
      setup_.step_appending && std::find(counts.begin(), counts.end(), count) != counts.end();
  if (appending) {
    auto b = std::lower_bound(setup_.buckets.begin(), setup_.buckets.end(), n);
    appending = b != setup_.buckets.end();
    if (appending) total = *b;
  }
  const StepKind kind{appending, setup_.step_last && count == setup_.last_count &&
                                     (!appending || setup_.step_last_appending)};
  const int64_t positions = kind.logit_positions(count);
  StepBuffers& buffers = buffers_.For(total, count, past, ordinal);
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
  if (!out.ok()) {
    for (const SeqPtr& s : group) End(s, out.status(), "");
    return;
  }
  const Tensor& logits = (*out)[setup_.contract.logits];
  const int64_t vocab = setup_.contract.vocab;
  for (int64_t r = 0; r < n; ++r) {
    Sequence& s = *group[static_cast<size_t>(r)];
    s.cached += count;
    if (setup_.config.prefix_cache) cache_->Register(s.tokens, s.cached, s.table);
    if (s.pending() == 0) Sample(s, logits.data<float>() + ((r + 1) * positions - 1) * vocab);
  }
  for (const SeqPtr& s : group) {
    if (s->ended) continue;
    if (s->stopped || s->generated >= s->limit) {
      End(s, absl::OkStatus(), s->stopped ? "stop" : "length");
    }
  }
}

absl::StatusOr<std::vector<Tensor>> Generator::StepOnce(const std::vector<StepRow>& rows,
                                                        int64_t count, int64_t past, StepKind kind,
                                                        StepBuffers& buffers) {
  const int64_t total = buffers.key[0];
  // What the step's build did not take of a group's old buffers goes with the step, on
  // every path (a copying step takes none of it; an allocation may throw).
  struct ClearSpare {
    SpareMemory& spare;
    ~ClearSpare() { spare.Clear(); }
  } clear_spare{buffers_.spare()};
  std::vector<Tensor> out;
  if (kind.appending) {
    const absl::Status built = BuildAppendingStep(
        setup_.contract, setup_.signature, *cache_, rows, total, count, kind.logit_positions(count),
        past, buffers.in, buffers.out, buffers.held, &buffers_.spare());
    buffers_.spare().Clear();  // before the run: what the new shape did not take
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
    RETURN_IF_ERROR(
        BuildStepInputs(setup_.contract, setup_.signature, *cache_, rows, count, past, buffers.in));
    const StepFn& step = kind.last ? setup_.step_last : setup_.step;
    ASSIGN_OR_RETURN(out, step(buffers.in, total, std::move(buffers.out)));
    std::lock_guard<std::mutex> lk(mu_);
    ++stats_.steps_copied;
  }
  if (kind.last) {
    std::lock_guard<std::mutex> lk(mu_);
    ++stats_.steps_last_position;
  }
  buffers.out = out;  // written over (appending: appended to) by the next step of this shape
  RETURN_IF_ERROR(StoreStep(setup_.contract, *cache_, rows, count, past, out));
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

void Generator::End(const SeqPtr& seq, absl::Status status, std::string reason) {
  if (seq->ended) return;
  seq->ended = true;
  cache_->Release(seq->table);
  if (seq->running) {
    seq->running = false;
    running_.remove(seq);
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    RecordPool();
  }
  seq->stream->Finish(std::move(status), std::move(reason), seq->prompt_len);
}

}  // namespace kiln::server::generate
