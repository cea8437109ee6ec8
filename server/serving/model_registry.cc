#include "server/serving/model_registry.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <set>
#include <thread>

#include "base/file.h"
#include "base/memory_budget.h"
#include "base/stop.h"
#include "compiler/onnx/importer.h"
#include "compiler/onnx/normalize.h"
#include "server/common/crash_point.h"
#include "server/common/echo.h"
#include "server/common/mapped_file.h"
#include "server/metrics/kiln_metrics.h"
#include "server/model/bound_inputs.h"
#include "server/model/cache_mask.h"
#include "server/serving/request_validation.h"

namespace kiln::server {

namespace {

// The cache keys on the file's bytes, not its path: a re-uploaded model under the same name
// gets new engines, and a copy of a model under another name shares the cached ones.
// (External data files are not hashed: such a model's cache entries are keyed on the .onnx
// only.)
CacheContext CacheFor(EngineCache* cache, const MappedFile& file) {
  if (!cache) return {};
  return CacheContext{cache, ContentHash(file.bytes())};
}

// The model file as a graph, from a mapping of the file (external data relative to its
// folder, as ImportModelFile does).
absl::StatusOr<std::unique_ptr<Graph>> ImportMapped(const MappedFile& file,
                                                    const std::string& path) {
  onnx_io::ImportOptions options;
  options.model_dir = std::filesystem::path(path).parent_path().string();
  if (options.model_dir.empty()) options.model_dir = ".";
  return onnx_io::ImportModelBytes(file.bytes(), options);
}

// ai.onnx opsets newer than the normalizer's internal form may change what an operator means
// (a new attribute default, a new input), which Kiln would then compute silently wrong.
absl::Status CheckOpsets(const Graph& g) {
  for (const auto& [domain, version] : g.opsets) {
    if ((domain.empty() || domain == "ai.onnx") && version > onnx_io::kInternalOpset) {
      return absl::UnimplementedError(absl::StrCat("the model imports ai.onnx opset ", version,
                                                   "; Kiln implements ai.onnx opsets up to ",
                                                   onnx_io::kInternalOpset));
    }
  }
  return absl::OkStatus();
}

}  // namespace

void ModelRegistry::SetStateListener(StateListener l) { listener_ = std::move(l); }

void ModelRegistry::NotifyLocked(const std::string& name) {
  if (!listener_) return;
  bool serving = false;
  auto it = models_.find(name);
  if (it != models_.end()) {
    for (const auto& [v, mv] : it->second) serving |= mv->state() == ModelState::kReady;
  }
  listener_(name, serving);
}

void ModelRegistry::LoadRepository() {
  std::vector<std::string> skipped;
  auto models = repository_.Scan(&skipped);
  for (const std::string& s : skipped) spdlog::warn("model repository: skipped: {}", s);
  if (!models.ok()) {
    spdlog::error("model repository: {}", std::string(models.status().message()));
    repository_loaded_ = true;  // nothing more will come; an empty repository is ready
    return;
  }
  for (const RepositoryModel& m : *models) {
    for (int64_t v : m.versions) {
      if (stopping_) break;
      (void)LoadVersion(m.name, v, m.config_yaml);  // logs its own outcome; FAILED stays visible
    }
  }
  repository_loaded_ = true;
}

absl::Status ModelRegistry::LoadVersion(const std::string& name, int64_t version,
                                        const std::string& yaml) {
  const KeyedMutex::Lock name_lock = name_locks_.Acquire(name);
  ModelConfig fallback = defaults_;
  RETURN_IF_ERROR(FinalizeModelConfig(fallback));
  auto config = yaml.empty() ? absl::StatusOr<ModelConfig>(fallback)
                             : ParseModelConfig(yaml, defaults_, name + "/config.yaml");
  auto mv = std::make_shared<ModelVersion>(name, version, config.ok() ? *config : fallback);
  mv->SetReason("waiting to load");
  {
    std::lock_guard<std::mutex> lk(mu_);
    // An upload that committed this version after the scan already serves it.
    if (models_[name].count(version)) return absl::OkStatus();
    models_[name][version] = mv;
    NotifyLocked(name);
  }
  spdlog::info("model {} version {}: loading on {}", name, version, mv->config().device);
  absl::Status status = config.status();
  if (status.ok()) {
    status = repository_.RelativePaths(Build(*mv, repository_.ModelPath(name, version)));
  }
  if (!status.ok()) mv->Fail(std::string(status.message()));
  spdlog::log(status.ok() ? spdlog::level::info : spdlog::level::err, "model {} version {}: {}{}",
              name, version, ModelStateName(mv->state()),
              status.ok() ? "" : absl::StrCat(" (", status.message(), ")"));
  std::lock_guard<std::mutex> lk(mu_);
  NotifyLocked(name);
  return status;
}

absl::Status ModelRegistry::Build(ModelVersion& mv, const std::string& path) {
  std::lock_guard<std::mutex> build_lock(build_mu_);
  // Everything the build allocates as tensors (weights, folded constants, reference
  // activations) is charged to its own account: a tiny model asking for a huge constant
  // fails with RESOURCE_EXHAUSTED instead of taking the machine.
  return WithinBudget(
      std::make_shared<MemoryAccount>(
          absl::StrCat("the build of model '", mv.name(), "' version ", mv.version()),
          limits_.max_build_memory_bytes, ProcessMemory(), "server.max_build_memory_bytes"),
      [&] { return BuildLocked(mv, path); });
}

absl::Status ModelRegistry::BuildLocked(ModelVersion& mv, const std::string& path) {
  // BeginShutdown sets stopping_: the compiler, the engines' tuning and the warm-up check
  // poll it between steps, so a build in progress never holds up a shutdown.
  const StopScope stop({StopCondition::Clock::time_point::max(), &stopping_, "model load"});
  auto stopped = [] { return absl::CancelledError("the server is stopping: model load stopped"); };
  if (stopping_) return stopped();
  mv.SetReason("importing");
  const auto import_start = std::chrono::steady_clock::now();
  // One mapping serves the cache key's hash and the import: the file is read once, and
  // copied once (into the graph's constants).
  ASSIGN_OR_RETURN(std::shared_ptr<const MappedFile> file, MappedFile::Open(path));
  CacheContext cache = CacheFor(cache_.get(), *file);
  // A warm load's engines are rebuilt from the cache beside the import (model_builder.h).
  // CPU only: a GPU engine's build on another thread would need that thread's device context.
  std::optional<CachePrefetch> prefetch;
  if (cache.cache && mv.config().device == "cpu") {
    prefetch.emplace(cache, mv.config());
    cache.prefetch = &*prefetch;
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Graph> graph, ImportMapped(*file, path));
  file.reset();
  RETURN_IF_ERROR(CheckOpsets(*graph));
  ASSIGN_OR_RETURN(const std::vector<std::string> bound, BindInputs(*graph, mv.config()));
  for (const std::string& b : bound) {
    spdlog::info("model {} version {}: input bound: {}", mv.name(), mv.version(), b);
  }
  ASSIGN_OR_RETURN(CacheMaskOutcome mask, AddCacheMask(*graph, mv.config()));
  if (mask.reported()) {
    spdlog::info("model {} version {}: {}", mv.name(), mv.version(), mask.ToString());
  }
  CrashPoint("build-started");
  const auto build_start = std::chrono::steady_clock::now();
  ModelConfig config = mv.config();
  // Sample inputs shipped beside the model file feed the warm-up check (warmup_samples.h).
  config.warmup.samples_dir = std::filesystem::path(path).parent_path().string();
  auto built = BuildModel(
      *graph, config, [&](const std::string& p) { mv.SetReason(p); }, cache);
  // Whatever a stopped build returned (its step's CANCELLED, or an error the stop caused),
  // the reason is the stop.
  if (stopping_) return stopped();
  metrics::RecordModelBuild(
      mv.name(), CheckOutcome(built.status(), built.ok() ? &built->check : nullptr), build_start);
  if (!built.ok()) return built.status();
  built->bound_inputs = bound;
  if (mask.added()) built->signature.ones_when_absent.insert(mask.input);
  built->cache_mask = std::move(mask);
  built->times.import_ms =
      std::chrono::duration<double, std::milli>(build_start - import_start).count();
  spdlog::info("model {} version {}: built {} bucket(s): {}", mv.name(), mv.version(),
               built->buckets.size(), built->times.ToString());
  if (built->check.precision != "float32" || !built->check.precision_message.empty()) {
    spdlog::info(
        "model {} version {}: precision {} (check: relative error {:.3g}, max_abs_err {:.3g}){}{}",
        mv.name(), mv.version(), built->check.precision, built->check.norm_rel_err,
        built->check.max_abs_err, built->check.precision_message.empty() ? "" : ": ",
        built->check.precision_message);
  }
  const bool dynamic = built->signature.dynamic();
  if (!built->padding_refused.empty()) {
    spdlog::info("model {} version {}: one engine set per exact shape, not shape classes: {}",
                 mv.name(), mv.version(), built->padding_refused);
  }
  if (built->padding) mv.SetReason("building the shape classes' engines");
  mv.SetFolder(std::filesystem::path(path).parent_path().string());
  return mv.Start(std::move(*built),
                  dynamic ? std::shared_ptr<const Graph>(std::move(graph)) : nullptr);
}

absl::StatusOr<int64_t> ModelRegistry::ChooseVersion(const std::string& name,
                                                     std::optional<int64_t> version) const {
  if (version) {
    if (*version < 1) {
      return absl::InvalidArgumentError(absl::StrCat("model version must be >= 1, got ", *version));
    }
    return *version;
  }
  // Above every stored and every loaded version: a loaded version whose files were removed
  // behind the server's back is not silently replaced.
  int64_t newest = 0;
  if (auto stored = repository_.Find(name); stored.ok()) newest = stored->versions.back();
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = models_.find(name);
    if (it != models_.end() && !it->second.empty()) {
      newest = std::max(newest, it->second.rbegin()->first);
    }
  }
  return NextVersion(name, newest);
}

// The uploaded config_yaml, else the model's stored config.yaml (what a restart would use).
absl::StatusOr<ModelConfig> ModelRegistry::UploadConfig(const std::string& name,
                                                        const std::string& yaml) const {
  if (!yaml.empty()) return ParseModelConfig(yaml, defaults_, "config_yaml");
  auto read = repository_.ReadConfig(name);
  if (!read.ok()) return repository_.RelativePaths(read.status());
  const std::string& stored = *read;
  if (!stored.empty()) return ParseModelConfig(stored, defaults_, name + "/config.yaml");
  ModelConfig config = defaults_;
  RETURN_IF_ERROR(FinalizeModelConfig(config));
  return config;
}

absl::StatusOr<std::shared_ptr<ModelVersion>> ModelRegistry::LoadUpload(
    const std::string& name, std::optional<int64_t> version, std::unique_ptr<StagedModel> staged) {
  RETURN_IF_ERROR(ValidateModelName(name));
  std::shared_ptr<ModelVersion> mv, replaced;
  {
    const KeyedMutex::Lock name_lock = name_locks_.Acquire(name);
    if (stopping_) return absl::UnavailableError("the server is stopping");
    ASSIGN_OR_RETURN(const int64_t v, ChooseVersion(name, version));
    ASSIGN_OR_RETURN(ModelConfig config, UploadConfig(name, staged->config_yaml()));
    mv = std::make_shared<ModelVersion>(name, v, std::move(config));
    spdlog::info("model {} version {}: loading an upload on {}", name, v, mv->config().device);
    if (absl::Status s = repository_.RelativePaths(Build(*mv, staged->model_path())); !s.ok()) {
      spdlog::error("model {} version {}: upload rejected ({})", name, v, std::string(s.message()));
      return s;
    }
    CrashPoint("upload-built");
    // The uploader may have gone while it built (its deadline, a cancel): nothing lands.
    if (absl::Status s = CheckStop(); !s.ok()) {
      spdlog::warn("model {} version {}: upload abandoned ({})", name, v, std::string(s.message()));
      return s;
    }
    RETURN_IF_ERROR(repository_.RelativePaths(repository_.Commit(*staged, name, v)));
    CrashPoint("upload-committed");
    replaced = Publish(mv);
    spdlog::info("model {} version {}: READY{}", name, v, replaced ? " (replaced)" : "");
  }
  if (replaced) {
    // Returns once the replaced engines are freed, so back-to-back uploads never hold more
    // than two copies of a model.
    std::vector<std::weak_ptr<ModelVersion>> gone = {replaced};
    replaced.reset();
    WaitUntilReleased(gone);
  }
  return mv;
}

absl::Status ModelRegistry::LoadFromRepository(const std::string& name) {
  RETURN_IF_ERROR(ValidateModelName(name));
  std::vector<std::weak_ptr<ModelVersion>> gone;
  {
    const KeyedMutex::Lock name_lock = name_locks_.Acquire(name);
    if (stopping_) return absl::UnavailableError("the server is stopping");
    auto found = repository_.Find(name);
    if (!found.ok()) return repository_.RelativePaths(found.status());
    const RepositoryModel& stored = *found;
    ASSIGN_OR_RETURN(const ModelConfig config, UploadConfig(name, ""));
    std::vector<std::shared_ptr<ModelVersion>> built;
    for (const int64_t v : stored.versions) {
      auto mv = std::make_shared<ModelVersion>(name, v, config);
      spdlog::info("model {} version {}: loading from the repository on {}", name, v,
                   config.device);
      if (absl::Status s = repository_.RelativePaths(Build(*mv, repository_.ModelPath(name, v)));
          !s.ok()) {
        spdlog::error("model {} version {}: load rejected ({})", name, v, std::string(s.message()));
        return absl::Status(s.code(),
                            absl::StrCat("model '", name, "' version ", v, ": ", s.message()));
      }
      built.push_back(std::move(mv));
    }
    std::lock_guard<std::mutex> lk(mu_);
    auto& versions = models_[name];
    for (const auto& [v, mv] : versions) gone.push_back(mv);  // replaced or no longer stored
    versions.clear();
    for (auto& mv : built) versions[mv->version()] = std::move(mv);
    NotifyLocked(name);
  }
  WaitUntilReleased(gone);
  spdlog::info("model {}: loaded from the repository", name);
  return absl::OkStatus();
}

std::shared_ptr<ModelVersion> ModelRegistry::Publish(std::shared_ptr<ModelVersion> mv) {
  std::lock_guard<std::mutex> lk(mu_);
  const std::string name = mv->name();
  models_[name][mv->version()].swap(mv);
  NotifyLocked(name);
  return mv;  // what the slot held before
}

absl::StatusOr<std::shared_ptr<ModelVersion>> ModelRegistry::Find(
    const std::string& name, std::optional<int64_t> version) const {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = models_.find(name);
  if (it == models_.end() || it->second.empty()) {
    return absl::NotFoundError(absl::StrCat("model '", EchoName(name), "' is not loaded"));
  }
  const auto& versions = it->second;
  if (version) {
    auto v = versions.find(*version);
    if (v == versions.end()) {
      return absl::NotFoundError(
          absl::StrCat("model '", name, "' has no loaded version ", *version));
    }
    return v->second;
  }
  for (auto v = versions.rbegin(); v != versions.rend(); ++v) {
    if (v->second->state() == ModelState::kReady) return v->second;
  }
  return versions.rbegin()->second;
}

absl::Status ModelRegistry::Unload(const std::string& name, std::optional<int64_t> version,
                                   bool delete_files) {
  std::vector<std::weak_ptr<ModelVersion>> gone;
  {
    // Not while an upload of this name builds or commits: its files and entry would come
    // back after this removed them.
    const KeyedMutex::Lock name_lock = name_locks_.Acquire(name);
    {
      std::lock_guard<std::mutex> lk(mu_);
      auto it = models_.find(name);
      if (it == models_.end()) {
        return absl::NotFoundError(absl::StrCat("model '", EchoName(name), "' is not loaded"));
      }
      for (const auto& [v, mv] : it->second) {
        if (!version || v == *version) gone.push_back(mv);
      }
      if (version && gone.empty()) {
        return absl::NotFoundError(
            absl::StrCat("model '", name, "' has no loaded version ", *version));
      }
      if (version) it->second.erase(*version);
      if (!version || it->second.empty()) models_.erase(it);
      NotifyLocked(name);
    }
    if (delete_files) {
      RETURN_IF_ERROR(repository_.RelativePaths(repository_.Remove(name, version)));
    }
  }
  // A generation runs as long as its client reads: end them now (UNAVAILABLE), or the wait
  // below would outlast them.
  for (const auto& w : gone) {
    std::shared_ptr<ModelVersion> mv = w.lock();
    if (mv && mv->state() == ModelState::kReady && mv->generator_) {
      mv->generator_->Stop(absl::StrCat("model '", name, "' was unloaded"));
    }
  }
  WaitUntilReleased(gone);
  spdlog::info("model {}: unloaded{}", name, version ? absl::StrCat(" version ", *version) : "");
  return absl::OkStatus();
}

void ModelRegistry::WaitUntilReleased(const std::vector<std::weak_ptr<ModelVersion>>& gone) {
  // New requests cannot find these versions any more; the ones already holding them finish
  // on their engines, and the last holder destroys the batcher and engines. Waiting for that
  // makes UnloadModel return only once the model's memory is free, so a client can reload at
  // once without two copies alive. Bounded, so a stuck request cannot hang the caller.
  const auto until = std::chrono::steady_clock::now() + kUnloadWait;
  for (const auto& w : gone) {
    while (!w.expired() && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    if (!w.expired()) spdlog::warn("unload: a version is still in use after the wait");
  }
}

std::vector<std::shared_ptr<ModelVersion>> ModelRegistry::List() const {
  std::lock_guard<std::mutex> lk(mu_);
  std::vector<std::shared_ptr<ModelVersion>> out;
  for (const auto& [name, versions] : models_) {
    for (const auto& [v, mv] : versions) out.push_back(mv);
  }
  return out;
}

void ModelRegistry::StopAll() {
  std::vector<std::shared_ptr<ModelVersion>> all = List();
  for (auto& mv : all) {
    // READY is published after batcher_ is set, so this never races a load in progress.
    if (mv->state() != ModelState::kReady) continue;
    if (mv->generator_) mv->generator_->Stop("the server is stopping");
    mv->batcher_->Stop();
    if (mv->shapes_) mv->shapes_->Stop();
  }
}

}  // namespace kiln::server
