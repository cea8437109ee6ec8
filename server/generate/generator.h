// The generation loop of one decoder model version: continuous batching over a paged
// key/value cache the server holds (server/generate/kv_cache.h).
//
// One scheduler thread owns every sequence. Each iteration it
//   1. ends the sequences whose caller cancelled or whose deadline passed (their pages are
//      freed at once),
//   2. admits waiting requests, oldest first, while there is a free running slot and the
//      cache holds their prompt (requests join at step boundaries),
//   3. reads prompts in chunks of `prefill_chunk` tokens, oldest sequence first, until
//      `prefill_budget` tokens were read this iteration, so a long prompt never stalls the
//      running decodes for longer than the budget,
//   4. runs one decode step for every other running sequence, batched (at most `max_rows`
//      rows per engine run), each at its own length: the past padded to one shape class,
//      the attention mask hiding the padding (server/generate/step.h); or, for a model that
//      cannot be padded (GeneratorSetup::exact), the rows of each exact length together.
// A sequence that needs a page when none is free preempts the most recently admitted
// sequence: its pages are freed and it goes back to the head of the queue with the tokens it
// made so far, to be recomputed from them when pages free up (nothing lost, no crash).
//
// The engine runs through `StepFn` (the model version's batcher in the server; the reference
// interpreter in tests), so generation and Predict share one engine set and one queue.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/memory_budget.h"
#include "base/status.h"
#include "server/common/model_signature.h"
#include "server/generate/decoder_contract.h"
#include "server/generate/generation_config.h"
#include "server/generate/kv_cache.h"
#include "server/generate/sampler.h"
#include "server/generate/step.h"
#include "server/generate/step_buffers.h"
#include "server/generate/step_lanes.h"
#include "server/generate/stream.h"
#include "server/generate/tokenizer.h"

namespace kiln::server::generate {


struct GenerateParams {
  std::vector<int64_t> prompt;
  int64_t max_tokens = 16;
  SamplingParams sampling;
  std::vector<int64_t> stop_token_ids;  // with the model's eos_token_ids unless ignore_eos
  bool ignore_eos = false;
  std::vector<std::vector<int64_t>> stop_sequences;
  bool logprobs = false;
  std::optional<Clock::time_point> deadline;
};

// Runs one step: `inputs` in signature order, `rows` rows; the outputs in signature order.
// `reuse`: the outputs of an earlier step of the same shape (or nothing), to be written over
// when the engine can (RunHints::outputs).
using StepFn = std::function<absl::StatusOr<std::vector<Tensor>>(
    std::vector<Tensor> inputs, int64_t rows, std::vector<Tensor> reuse)>;
// The past size a step runs at for a longest cache of `n` positions (a shape class >= n).
using PastSizeFn = std::function<int64_t(int64_t n)>;

// Observations for the metrics; each may be empty.
struct GenerationHooks {
  std::function<void(double seconds)> first_token, inter_token;
  std::function<void(int64_t tokens)> generated;
  std::function<void()> preempted;
};

struct GeneratorStats {
  int64_t running = 0, waiting = 0;
  int64_t pages_total = 0, pages_free = 0;
  int64_t preemptions = 0, tokens = 0;
  int64_t steps_in_place = 0, steps_copied = 0;  // engine steps by kind (step_appending or not)
  int64_t steps_last_position = 0;               // of them, prefill chunks through step_last
  int64_t steps_last_padded = 0;  // of those, short chunks padded to last_count (last_from)
  int64_t prefix_tokens = 0;  // prompt positions taken from other sequences' pages, not computed
  int64_t pages_cached = 0;   // of pages_free: registered pages kept for prefix sharing
  // Bytes of step tensors the loop holds between iterations (kept step buffers and spare
  // memory): bounded by the groups' shapes, 0 when idle.
  int64_t step_buffer_bytes = 0;
};

struct GeneratorSetup {
  DecoderContract contract;
  ModelSignature signature;
  GenerationConfig config;
  int64_t max_rows = 1;  // rows one engine run takes (the largest batch bucket)
  // The token counts a step may feed (the sequence dim's range) and the longest context
  // (cached positions, the past dim's range).
  int64_t min_step = 1, max_step = 1, max_context = 1;
  StepFn step;
  // Set when every engine appends the cache in place (runtime::Engine::RunAppending): steps
  // run through it with the presents kept between steps (BuildAppendingStep), at the batch
  // sizes `buckets` (ascending), for steps feeding a count of tokens in `append_counts` (the
  // sequence dim's shape classes: a step at another count is padded to its class on the way
  // to the engine, so its outputs cannot be the kept ones; it takes `step`).
  StepFn step_appending;
  std::vector<int64_t> buckets, append_counts;
  // Steps feeding exactly `last_count` tokens (full prefill chunks) whose logits are those
  // of their last position only, [rows, 1, vocab]: the model cut back from its logits
  // (compiler/shape/last_position.h), so a chunk does not project every position onto the
  // vocabulary to sample from one. step_last_appending: the same through RunAppending (set
  // when step_appending is). Unset: every step takes `step`.
  StepFn step_last, step_last_appending;
  int64_t last_count = 0;
  // When in [2, last_count): steps feeding last_from to last_count - 1 tokens (a prompt's
  // short last chunk) take step_last too, padded to last_count new positions (BuildStepInputs'
  // `width`): the engines keep the mask's last real position (the cut by the mask), so such a
  // chunk neither projects every position onto the vocabulary nor pays a full engine's
  // outputs. 0: only exactly last_count tokens do.
  int64_t last_from = 0;
  PastSizeFn past_size;
  // Steps at their rows' exact cache length instead of a padded class (past_size unused): a
  // decode step batches only rows of one length and a prompt's first step has an empty past.
  // For a model the loop cannot pad: no attention mask, or positions counted from the cache's
  // length (the padding proof refused it). Required when the contract has no mask.
  bool exact = false;
  // Padded steps whose rows must share their cache length: the model reads every row's
  // positions from its mask's first row (server/model/cache_mask.h, mask_positions.h).
  bool rows_share_length = false;
  // Steps of one iteration run at once (step_lanes.h): the model's engine instances, each on
  // its share of the cores.
  int lanes = 1;
  GenerationHooks hooks;
  // The model's SentencePiece tokenizer when its folder ships one (text in and out), else null.
  std::shared_ptr<const Tokenizer> tokenizer;
};

// FAILED_PRECONDITION (INVALID_ARGUMENT for the config) when `setup` cannot run: a step
// range without one token, no mask and no exact lengths, exact lengths with the padded
// steps, padded steps without past classes.
absl::Status ValidateGeneratorSetup(const GeneratorSetup& setup);
// INVALID_ARGUMENT naming the field when a request does not fit `setup` (an empty prompt, a
// token outside the vocabulary, a prompt that fills the context, max_tokens out of range,
// bad sampling parameters).
absl::Status CheckGenerateParams(const GeneratorSetup& setup, const GenerateParams& params);

class Generator {
 public:
  static absl::StatusOr<std::unique_ptr<Generator>> Create(GeneratorSetup setup,
                                                           std::shared_ptr<MemoryAccount> account);
  ~Generator();  // Stop()s
  Generator(const Generator&) = delete;
  Generator& operator=(const Generator&) = delete;

  // Queues a request. INVALID_ARGUMENT for a bad prompt or parameters (naming them),
  // RESOURCE_EXHAUSTED when max_sequences are running and as many wait, UNAVAILABLE once
  // stopped.
  absl::StatusOr<std::shared_ptr<GenerationStream>> Submit(GenerateParams params);
  // Ends every request (UNAVAILABLE naming `why`) and joins the scheduler. Idempotent.
  void Stop(const std::string& why = "the model is unloading");
  GeneratorStats stats() const;
  const GenerationConfig& config() const { return setup_.config; }
  int64_t max_context() const { return setup_.max_context; }
  const Tokenizer* tokenizer() const { return setup_.tokenizer.get(); }
  bool appends_in_place() const { return static_cast<bool>(setup_.step_appending); }

 private:
  struct Sequence;
  using SeqPtr = std::shared_ptr<Sequence>;
  Generator(GeneratorSetup setup, std::unique_ptr<KvCache> cache);
  void Loop();
  // One scheduler iteration; false when there was nothing to do.
  bool Iterate();
  void ReapEnded();
  void Admit();
  // Removes `s` from the head of the queue; false when it is no longer there (Stop took the
  // queue while the scheduler was placing it).
  bool TakeWaiting(const SeqPtr& s);
  // Prefix sharing: a running sequence is still computing whole pages of its prompt that `s`
  // starts with. Prompts that arrive together (a shared system prompt) then wait for the
  // first one's pages instead of each computing them: a few scheduler iterations, bounded
  // by that prompt's prefill.
  bool AwaitsSharedPrefix(const Sequence& s) const;
  // The running count and the cache's page counts into stats_ (mu_ held).
  void RecordPool();
  // What one lane runs: a decode group's step (ordinal >= 0: the group's place in its
  // iteration; counts {1}), or a sequence's prompt chunks in order (ordinal -1).
  struct StepJob {
    std::vector<SeqPtr> group;
    std::vector<int64_t> counts;
    int64_t ordinal = -1;
  };
  // Prompt chunks, up to prefill_budget tokens: the oldest sequence's whole prompt first, or
  // (`spread`) a chunk per sequence per pass so that several prompts read side by side.
  std::vector<StepJob> PlanPrefill(bool spread);
  // One step per group of sequences ready to decode, their pages reserved (which may preempt).
  std::vector<StepJob> PlanDecode();
  // Runs `jobs` side by side on the lanes, then applies their effects. `decodes`: the
  // iteration's decode groups are among them (their kept buffers are sized and trimmed).
  void RunJobs(const std::vector<StepJob>& jobs, bool decodes);
  // What a step leaves to the scheduler, applied (Apply) once every step of the phase has
  // finished: the lanes share no scheduler state.
  struct StepEffects {
    struct Ended {
      SeqPtr seq;
      absl::Status status;
      std::string reason;
    };
    std::vector<Ended> ended;      // failed, stopped or at their limit
    std::vector<SeqPtr> computed;  // read tokens: their whole pages register for sharing
  };
  void Apply(std::vector<StepEffects>& effects);
  // Runs one step feeding `count` tokens of each of `group` on `lane`; samples each row's
  // next token when it has read every token it had. A failure ends the group's sequences
  // (through `effects`). `ordinal`: the decode group's place in its iteration (-1: a
  // prefill step).
  void RunStep(const std::vector<SeqPtr>& group, int64_t count, int64_t ordinal, int lane,
               StepEffects& effects);
  // Pages for `seq` to hold `positions`, preempting younger sequences while they lack; false
  // when even alone it does not fit (then it was ended).
  bool Reserve(const SeqPtr& seq, int64_t positions);
  void Preempt(const SeqPtr& victim);
  void Sample(Sequence& seq, const float* logits);
  void End(const SeqPtr& seq, absl::Status status, std::string reason);

  // How RunStep runs a step: through step_appending (sized to a batch bucket), through
  // step_last (logits of the last position only).
  struct StepKind {
    bool appending = false, last = false;
    int64_t width = 0;  // the new positions the engine runs at (>= the count fed)
    int64_t rows = 0;   // the rows it runs at: the group's, or (appending) their batch bucket
    // The positions of a step's logits: the last one only, or every one it fed.
    int64_t logit_positions(int64_t count) const { return last ? 1 : count; }
  };
  StepKind KindOf(int64_t count, int64_t rows) const;
  // Runs the step's engine over `rows` into `buffers` (`kind` as RunStep chose it), the
  // cache stored; the outputs.
  absl::StatusOr<std::vector<Tensor>> StepOnce(const std::vector<StepRow>& rows, int64_t count,
                                               int64_t past, StepKind kind, StepBuffers& buffers);

  GeneratorSetup setup_;
  std::unique_ptr<KvCache> cache_;
  StepBufferSet buffers_;  // scheduler thread and its lanes (step_buffers.h)
  StepLanes lanes_;
  std::vector<int64_t> eos_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<SeqPtr> waiting_;   // guarded by mu_
  bool stopping_ = false;        // guarded by mu_
  std::string stop_reason_;      // guarded by mu_
  GeneratorStats stats_;         // guarded by mu_
  std::list<SeqPtr> running_;    // scheduler thread only, admission order
  std::thread thread_;
  uint64_t next_id_ = 1;  // Sequence::id, guarded by mu_
};

}  // namespace kiln::server::generate
