#include "server/generate/generator.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "server/generate/generator_sequence.h"

namespace kiln::server::generate {

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
    : setup_(std::move(setup)),
      cache_(std::move(cache)),
      buffers_(setup_.lanes),
      lanes_(setup_.lanes),
      eos_(setup_.config.eos_token_ids) {
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
    // Idle: the step buffers' memory waits a while for the next burst, then goes.
    buffers_.Park();
    const int64_t parked = buffers_.HeldBytes();
    std::unique_lock<std::mutex> lk(mu_);
    stats_.step_buffer_bytes = parked;
    auto work = [&] { return stopping_ || !waiting_.empty(); };
    if (cv_.wait_for(lk, std::chrono::milliseconds(setup_.config.keep_step_memory_ms), work)) {
      continue;
    }
    lk.unlock();
    buffers_.Clear();
    lk.lock();
    stats_.step_buffer_bytes = 0;
    cv_.wait(lk, work);
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
  if (lanes_.lanes() == 1) {
    RunJobs(PlanPrefill(/*spread=*/false), /*decodes=*/false);
    RunJobs(PlanDecode(), /*decodes=*/true);
  } else {
    // Side by side in one phase. The decodes reserve their pages first: a sequence they
    // preempt is gone before the prompts are planned. A prompt read to its end here decodes
    // from the next iteration on.
    std::vector<StepJob> jobs = PlanDecode();
    for (StepJob& j : PlanPrefill(/*spread=*/true)) jobs.push_back(std::move(j));
    RunJobs(jobs, /*decodes=*/true);
  }
  // What no step of this iteration took, beyond what the groups held at their most.
  const int64_t held = buffers_.TrimSpare();
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

std::vector<Generator::StepJob> Generator::PlanPrefill(bool spread) {
  int64_t budget = setup_.config.prefill_budget;
  const int64_t chunk = std::min(setup_.config.prefill_chunk, setup_.max_step);
  std::vector<StepJob> jobs;
  std::vector<int64_t> pending;  // of jobs[i]'s sequence, after its planned chunks
  // One more chunk of `s` (job `at`, or a new one at -1); false when `s` has none to read or
  // the budget is spent.
  auto take = [&](const SeqPtr& s, int& at) {
    const int64_t left = at < 0 ? s->pending() : pending[static_cast<size_t>(at)];
    if (budget <= 0 || left <= 1) return false;
    // The remainder first: every later chunk is whole, so the one a token is sampled from
    // runs on the last-position engines, and the partial one, at the start of the prompt,
    // has the least cache to bring in.
    const int64_t count = left % chunk == 0 ? chunk : left % chunk;
    if (at < 0) {
      at = static_cast<int>(jobs.size());
      jobs.push_back(StepJob{{s}, {}, -1});
      pending.push_back(left);
    }
    jobs[static_cast<size_t>(at)].counts.push_back(count);
    pending[static_cast<size_t>(at)] -= count;
    budget -= count;
    return true;
  };
  std::vector<int> job_of(running_.size(), -1);
  if (!spread) {  // the oldest sequence's whole prompt first
    size_t k = 0;
    for (const SeqPtr& s : running_) {
      while (take(s, job_of[k])) {
      }
      ++k;
      if (budget <= 0) break;  // the decodes keep their pace
    }
    return jobs;
  }
  // A chunk per sequence per pass, oldest first: as many prompts as lanes progress at once.
  for (bool more = true; more;) {
    more = false;
    size_t k = 0;
    for (const SeqPtr& s : running_) more |= take(s, job_of[k++]);
  }
  return jobs;
}

std::vector<Generator::StepJob> Generator::PlanDecode() {
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
  std::vector<StepJob> jobs;
  for (size_t at = 0, end = 0; at < group.size(); at = end) {
    const size_t limit = std::min(group.size(), at + static_cast<size_t>(setup_.max_rows));
    end = at + 1;
    const bool one_length = setup_.exact || setup_.rows_share_length;
    while (end < limit && (!one_length || group[end]->cached == group[at]->cached)) ++end;
    jobs.push_back(StepJob{std::vector<SeqPtr>(group.begin() + static_cast<std::ptrdiff_t>(at),
                                               group.begin() + static_cast<std::ptrdiff_t>(end)),
                           {1},
                           static_cast<int64_t>(jobs.size())});
  }
  return jobs;
}

void Generator::RunJobs(const std::vector<StepJob>& jobs, bool decodes) {
  size_t groups = 0;
  for (const StepJob& j : jobs) groups += j.ordinal >= 0 ? 1 : 0;
  if (decodes) buffers_.MakeGroups(groups);
  std::vector<StepEffects> effects(jobs.size());
  lanes_.Run(jobs.size(), [&](size_t i, int lane) {
    for (int64_t count : jobs[i].counts) {
      RunStep(jobs[i].group, count, jobs[i].ordinal, lane, effects[i]);
      if (!effects[i].ended.empty()) break;  // its sequence failed (or stopped)
    }
  });
  Apply(effects);
  // Groups beyond this iteration's last hold no rows now.
  if (decodes) buffers_.TrimGroups(groups);
}

void Generator::Apply(std::vector<StepEffects>& effects) {
  for (StepEffects& e : effects) {
    for (const SeqPtr& s : e.computed) {  // before any End: a sequence is in one job only
      if (setup_.config.prefix_cache) cache_->Register(s->tokens, s->cached, s->table);
    }
    for (StepEffects::Ended& x : e.ended) End(x.seq, std::move(x.status), std::move(x.reason));
  }
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
