// The loaded models: name -> version -> ModelVersion (state, signature, engines, batcher).
// A version is visible as LOADING while it compiles and checks, then READY or FAILED (with
// the reason). Requests hold a shared_ptr to the version they use, so unloading never pulls
// engines out from under a running batch: the last holder destroys the batcher (joining its
// workers) and then the engines.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "server/common/keyed_mutex.h"
#include "server/generate/generator.h"
#include "server/model/engine_cache.h"
#include "server/model/model_builder.h"
#include "server/model/model_config.h"
#include "server/model/padding.h"
#include "server/repository/model_repository.h"
#include "server/serving/batcher.h"
#include "server/serving/model_stats.h"
#include "server/serving/request_validation.h"
#include "server/serving/shape_engines.h"

namespace kiln::server {

enum class ModelState { kLoading, kReady, kFailed };
const char* ModelStateName(ModelState s);

class ModelVersion {
 public:
  ModelVersion(std::string name, int64_t version, ModelConfig config)
      : name_(std::move(name)), version_(version), config_(std::move(config)) {}
  ~ModelVersion();

  const std::string& name() const { return name_; }
  int64_t version() const { return version_; }
  const ModelConfig& config() const { return config_; }
  ModelState state() const { return state_.load(); }
  // Valid once READY (set before the state flips, never changed after).
  const BuiltModel& built() const { return built_; }
  std::string reason() const;
  // The version's request and engine counters; null until READY (created by Start).
  ModelStats* stats() const { return stats_.get(); }
  // A dynamic model's engines for shapes other than its warm-up one (config dynamic_dims);
  // null for static models and until READY.
  const ShapeEngines* shapes() const { return shapes_.get(); }
  // A decoder's generation loop (server/generate/); null until READY and for models that do
  // not generate, with generation_refused() saying why.
  generate::Generator* generator() const { return generator_.get(); }
  const std::string& generation_refused() const { return generation_refused_; }
  // Why the model's tokenizer.model was not taken ("" when there is none, or it loaded).
  const std::string& tokenizer_refused() const { return tokenizer_refused_; }
  // What the prefill engines cut from the model (the logits of a chunk's last position only),
  // or why prefill runs the model's own engines.
  const std::string& last_position() const { return last_position_; }
  // Why generation steps run at exact cache lengths, not padded classes ("" when padded).
  const std::string& exact_lengths() const { return exact_lengths_; }

  // Precondition: READY. `inputs` in signature order, validated (dim 0 == rows).
  // `abandoned`: see AbandonFlag (server/serving/batcher.h); `hints`: see RunHints.
  absl::StatusOr<std::future<Batcher::Result>> Submit(std::vector<Tensor> inputs, int64_t rows,
                                                      std::optional<Clock::time_point> deadline,
                                                      AbandonFlag abandoned = nullptr,
                                                      RunHints hints = {});
  // The same for inputs request validation produced: their dynamic dims are taken as it
  // computed them.
  absl::StatusOr<std::future<Batcher::Result>> Submit(ValidatedInputs in,
                                                      std::optional<Clock::time_point> deadline,
                                                      AbandonFlag abandoned = nullptr);

 private:
  friend class ModelRegistry;
  void SetReason(const std::string& r);
  // Takes the engines, starts the batcher, READY. `graph`: the imported model, kept by a
  // dynamic model to build engines for new shapes (unused by static ones).
  absl::Status Start(BuiltModel built, std::shared_ptr<const Graph> graph = nullptr);
  // A model served by shape classes (server/model/padding.h): every class's engines, every bucket,
  // built before READY.
  absl::Status BuildShapeClasses();
  // Starts the generation loop when the model is a decoder the loop can run
  // (server/serving/model_generation.cc); otherwise records why not. Its status: the loop's own
  // setup (a kv cache the memory budget refuses fails the model).
  absl::Status StartGeneration();
  // The SentencePiece tokenizer in the version's or the model's folder (tokenizer.model), or
  // null (none, or one that does not load: tokenizer_refused_ says why).
  std::shared_ptr<const generate::Tokenizer> LoadTokenizer();
  // Whether every engine appends each of `contract`'s caches in place (and the config lets
  // the loop use it): the generation steps then run through RunAppending.
  bool AppendsCacheInPlace(const generate::DecoderContract& contract);
  // Why the steps of `contract` cannot be padded to shape classes and must run at exact
  // cache lengths (no mask; no classes over the cache's length), or "".
  std::string ExactLengthsReason(const generate::DecoderContract& contract) const;
  // The cache's and the new positions' ranges, with exact_lengths_ decided; nullopt, with
  // generation_refused_ saying why, when generation cannot run.
  struct GenerationDims {
    std::pair<int64_t, int64_t> past, sequence;
  };
  std::optional<GenerationDims> FindGenerationDims(const generate::DecoderContract& contract);
  // A step through the model's engines (Submit) or the last-position ones, appending or not.
  generate::StepFn StepVia(bool last, bool appending);
  // The fewest tokens a short prefill chunk must feed to run padded on the last-position
  // engines (GeneratorSetup::last_from): above the sequence's next class below `chunk`.
  int64_t ShortChunksFrom(const generate::DecoderContract& contract, int64_t chunk) const;
  // The generator of `setup` with the hooks and tokenizer; a failure at exact lengths leaves
  // generation off (the model still serves Predict), any other fails the load.
  absl::Status CreateGenerator(generate::GeneratorSetup setup);
  // A decoder's prefill engines (server/serving/model_prefill.cc): the model cut to the
  // logits of its last position and proven (server/model/last_position_proof.h), an engine
  // per class of the past at `chunk` new positions, built before READY. Anything that fails
  // leaves them out (last_position_ says why): prefill then runs the model's own engines.
  void BuildLastPositionEngines(const generate::DecoderContract& contract, int64_t chunk);
  void DropLastPositionEngines(const std::string& why);
  // The folder of the version's model file (the repository's <name>/<version>), before Start.
  void SetFolder(std::string folder) { folder_ = std::move(folder); }
  void Fail(const std::string& reason);
  // UNAVAILABLE naming the state unless READY.
  absl::Status CheckReady() const;
  // Submit's routing once the dynamic dims are known (empty for static models).
  absl::StatusOr<std::future<Batcher::Result>> Route(std::vector<Tensor> inputs, int64_t rows,
                                                     DimValues dims,
                                                     std::optional<Clock::time_point> deadline,
                                                     AbandonFlag abandoned, RunHints hints = {});

  const std::string name_;
  const int64_t version_;
  const ModelConfig config_;
  std::atomic<ModelState> state_{ModelState::kLoading};
  mutable std::mutex reason_mu_;
  std::string reason_;                  // guarded by reason_mu_
  BuiltModel built_;                    // written once by Start before state_ becomes READY
  std::unique_ptr<ModelStats> stats_;   // written once by Start, like built_
  std::shared_ptr<const Graph> graph_;  // dynamic models only; written once by Start
  // Declared after built_, stats_ and graph_ so these are destroyed first: their workers use
  // them.
  std::unique_ptr<ShapeEngines> shapes_;
  std::shared_ptr<const Graph> last_graph_;  // written once by Start, before last_shapes_
  std::unique_ptr<ShapeEngines> last_shapes_;
  std::unique_ptr<Batcher> batcher_;
  // Runs steps through Submit, so it is stopped before the batchers (destructor).
  std::unique_ptr<generate::Generator> generator_;
  std::string generation_refused_;  // written once by Start
  std::string folder_;              // written before Start
  std::string tokenizer_refused_;   // written once by Start (LoadTokenizer)
  bool setup_appending_ = false;    // written once by Start (AppendsCacheInPlace)
  std::string last_position_;       // written once by Start (BuildLastPositionEngines)
  bool last_by_mask_ = false;       // its engines keep the mask's last real position
  std::string exact_lengths_;       // written once by Start (StartGeneration)
  BatchPolicy policy_;              // written once by Start
};

// Called on every state change of a model's default version (health service, logs).
using StateListener = std::function<void(const std::string& name, bool serving)>;

// What one request or one build may take (server config).
struct ServingLimits {
  // The tensor bytes one response may carry (server.max_message_bytes).
  int64_t max_response_bytes = int64_t{64} << 20;
  // What one model build may allocate, within the process budget
  // (server.max_build_memory_bytes; <= 0: only the process budget).
  int64_t max_build_memory_bytes = 0;
};

class ModelRegistry {
 public:
  ModelRegistry(ModelRepository repository, ModelConfig defaults)
      : repository_(std::move(repository)), defaults_(std::move(defaults)) {}
  ~ModelRegistry() { StopAll(); }

  void SetStateListener(StateListener l);  // before any load
  // Before any load; null (the default) compiles every model from scratch.
  void SetEngineCache(std::shared_ptr<EngineCache> cache) { cache_ = std::move(cache); }
  ModelRepository& repository() { return repository_; }
  void SetLimits(const ServingLimits& l) { limits_ = l; }  // before any load or request
  const ServingLimits& limits() const { return limits_; }

  // Loads every version of every model in the repository (failures stay visible as FAILED).
  void LoadRepository();
  // True once LoadRepository has finished: until then models not yet reached are not in
  // List(), so readiness must not be judged from List() alone.
  bool repository_loaded() const { return repository_loaded_.load(); }
  // An upload: builds the staged model beside whatever serves under its name (it is not
  // visible until READY), then commits its files to the repository and publishes it,
  // replacing the same version if one is loaded (requests on the old one finish on it).
  // `version` absent: one above the newest stored or loaded version. On any failure the
  // registry and the repository are as they were. Blocks until done.
  absl::StatusOr<std::shared_ptr<ModelVersion>> LoadUpload(const std::string& name,
                                                           std::optional<int64_t> version,
                                                           std::unique_ptr<StagedModel> staged);
  // KServe v2's RepositoryModelLoad: (re)loads every version of `name` stored in the
  // repository, with its config.yaml. All are built beside what serves; only when every one
  // is READY are they published (replacing loaded versions of the same numbers), and loaded
  // versions no longer stored are unloaded. On any failure nothing changes. Blocks until done.
  absl::Status LoadFromRepository(const std::string& name);
  // NOT_FOUND when the model (or the pinned version) is not loaded. Without a version: the
  // newest READY version, else the newest.
  absl::StatusOr<std::shared_ptr<ModelVersion>> Find(const std::string& name,
                                                     std::optional<int64_t> version) const;
  // Removes the version(s) so no new request finds them (and their files when
  // `delete_files`), then waits (at most kUnloadWait) until the requests already using them
  // are done and their engines are freed.
  absl::Status Unload(const std::string& name, std::optional<int64_t> version,
                      bool delete_files = false);
  std::vector<std::shared_ptr<ModelVersion>> List() const;  // by name, then version
  // The first step of shutdown: loads in progress stop at their next step (compile passes,
  // kernels, reference nodes) with CANCELLED, and new ones are refused (UNAVAILABLE).
  void BeginShutdown() { stopping_ = true; }
  // Stops every batcher (queued requests fail UNAVAILABLE). For shutdown, after draining.
  void StopAll();

 private:
  absl::Status LoadVersion(const std::string& name, int64_t version, const std::string& yaml);
  // Imports `path`, compiles and checks it, and starts `mv` (READY). One build at a time.
  absl::Status Build(ModelVersion& mv, const std::string& path);
  absl::Status BuildLocked(ModelVersion& mv, const std::string& path);  // build_mu_ held
  absl::StatusOr<int64_t> ChooseVersion(const std::string& name,
                                        std::optional<int64_t> version) const;
  absl::StatusOr<ModelConfig> UploadConfig(const std::string& name, const std::string& yaml) const;
  // Puts `mv` in place (replacing its name and version); returns what it replaced, if any.
  std::shared_ptr<ModelVersion> Publish(std::shared_ptr<ModelVersion> mv);
  void NotifyLocked(const std::string& name);  // precondition: mu_ held
  static void WaitUntilReleased(const std::vector<std::weak_ptr<ModelVersion>>& gone);

  static constexpr std::chrono::seconds kUnloadWait{30};

  ModelRepository repository_;
  const ModelConfig defaults_;
  StateListener listener_;
  std::shared_ptr<EngineCache> cache_;
  ServingLimits limits_;
  // Held across everything that writes one name: version choice, build, commit, publish,
  // unload. Taken before build_mu_ and mu_.
  KeyedMutex name_locks_;
  std::mutex build_mu_;    // one build at a time: compiling is CPU-bound
  mutable std::mutex mu_;  // guards models_; never held while compiling
  std::map<std::string, std::map<int64_t, std::shared_ptr<ModelVersion>>> models_;
  std::atomic<bool> repository_loaded_{false};
  std::atomic<bool> stopping_{false};
};

}  // namespace kiln::server
