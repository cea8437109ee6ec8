#include "server/model_registry.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <thread>

#include "base/file.h"
#include "compiler/onnx/importer.h"
#include "server/metrics/kiln_metrics.h"

namespace kiln::server {

const char* ModelStateName(ModelState s) {
  switch (s) {
    case ModelState::kLoading: return "LOADING";
    case ModelState::kReady: return "READY";
    case ModelState::kFailed: return "FAILED";
  }
  return "UNKNOWN";
}

ModelVersion::~ModelVersion() {
  if (batcher_) batcher_->Stop();
}

std::string ModelVersion::reason() const {
  std::lock_guard<std::mutex> lk(reason_mu_);
  return reason_;
}

void ModelVersion::SetReason(const std::string& r) {
  std::lock_guard<std::mutex> lk(reason_mu_);
  reason_ = r;
}

void ModelVersion::Fail(const std::string& reason) {
  SetReason(reason);
  state_ = ModelState::kFailed;
}

absl::Status ModelVersion::Start(BuiltModel built) {
  built_ = std::move(built);
  BatchPolicy policy;
  policy.buckets = built_.buckets;
  policy.batchable = built_.signature.batchable;
  policy.max_queue_delay = std::chrono::microseconds(config_.max_queue_delay_us);
  policy.max_queue_size = static_cast<size_t>(config_.max_queue_size);
  policy.model = name_;
  // gRPC handler threads wait for their result anyway: at low load they run it themselves.
  policy.inline_when_idle = true;
  // Worker w owns instance w of every bucket's engines, so no engine runs two batches at once.
  auto run = [this](int worker, const std::vector<Tensor>& in, std::vector<Tensor>& out) {
    const int64_t bucket = built_.signature.batchable ? in.at(0).dim(0) : built_.buckets[0];
    auto it = built_.engines.find(bucket);
    if (it == built_.engines.end()) return absl::InternalError("no engine for the batch size");
    return it->second.at(worker)->Run(in, out);
  };
  ASSIGN_OR_RETURN(batcher_, Batcher::Create(policy, config_.instances, run));
  SetReason("");
  state_ = ModelState::kReady;
  return absl::OkStatus();
}

absl::StatusOr<std::future<Batcher::Result>> ModelVersion::Submit(
    std::vector<Tensor> inputs, int64_t rows, std::optional<Clock::time_point> deadline) {
  if (state() != ModelState::kReady || !batcher_) {
    return absl::UnavailableError(absl::StrCat("model '", name_, "' version ", version_, " is ",
                                               ModelStateName(state())));
  }
  return batcher_->Enqueue(std::move(inputs), rows, deadline);
}

namespace {

// The cache keys on the file's bytes, not its path: a re-uploaded model under the same name
// gets new engines, and a copy of a model under another name shares the cached ones.
// (External data files are not hashed: such a model's cache entries are keyed on the .onnx
// only.)
CacheContext CacheFor(EngineCache* cache, const std::string& path) {
  if (!cache) return {};
  const std::optional<std::string> bytes = ReadWholeFile(path);
  if (!bytes) return {};
  return CacheContext{cache, ContentHash(*bytes)};
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
      (void)LoadVersion(m.name, v, m.config_yaml);  // logs its own outcome; FAILED stays visible
    }
  }
  repository_loaded_ = true;
}

absl::Status ModelRegistry::LoadFromRepository(const std::string& name,
                                               std::optional<int64_t> version) {
  ASSIGN_OR_RETURN(RepositoryModel m, repository_.Find(name));
  absl::Status first = absl::OkStatus();
  for (int64_t v : m.versions) {
    if (version && v != *version) continue;
    absl::Status s = LoadVersion(name, v, m.config_yaml);
    if (first.ok()) first = s;
  }
  return first;
}

absl::Status ModelRegistry::LoadVersion(const std::string& name, int64_t version,
                                        const std::string& yaml) {
  std::lock_guard<std::mutex> load_lock(load_mu_);
  ModelConfig fallback = defaults_;
  RETURN_IF_ERROR(FinalizeModelConfig(fallback));
  auto config = yaml.empty() ? absl::StatusOr<ModelConfig>(fallback)
                             : ParseModelConfig(yaml, defaults_, name + "/config.yaml");
  auto mv = std::make_shared<ModelVersion>(name, version, config.ok() ? *config : fallback);
  mv->SetReason("importing");
  {
    std::lock_guard<std::mutex> lk(mu_);
    models_[name][version] = mv;
    NotifyLocked(name);
  }
  spdlog::info("model {} version {}: loading on {}", name, version, mv->config().device);
  absl::Status status = config.status();
  if (status.ok()) {
    const std::string path = repository_.ModelPath(name, version);
    auto graph = onnx_io::ImportModelFile(path);
    status = graph.status();
    if (status.ok()) {
      const CacheContext cache = CacheFor(cache_.get(), path);
      const auto build_start = std::chrono::steady_clock::now();
      auto built = BuildModel(**graph, mv->config(),
                              [&](const std::string& p) { mv->SetReason(p); }, cache);
      metrics::RecordModelBuild(name, built.ok() ? &built->check : nullptr, built.status(),
                                build_start);
      status = built.ok() ? mv->Start(std::move(*built)) : built.status();
    }
  }
  if (!status.ok()) mv->Fail(std::string(status.message()));
  spdlog::log(status.ok() ? spdlog::level::info : spdlog::level::err, "model {} version {}: {}{}",
              name, version, ModelStateName(mv->state()),
              status.ok() ? "" : absl::StrCat(" (", status.message(), ")"));
  std::lock_guard<std::mutex> lk(mu_);
  NotifyLocked(name);
  return status;
}

absl::StatusOr<std::shared_ptr<ModelVersion>> ModelRegistry::Find(
    const std::string& name, std::optional<int64_t> version) const {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = models_.find(name);
  if (it == models_.end() || it->second.empty()) {
    return absl::NotFoundError(absl::StrCat("model '", name, "' is not loaded"));
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

absl::Status ModelRegistry::Unload(const std::string& name, std::optional<int64_t> version) {
  std::vector<std::weak_ptr<ModelVersion>> gone;
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = models_.find(name);
    if (it == models_.end()) {
      return absl::NotFoundError(absl::StrCat("model '", name, "' is not loaded"));
    }
    for (const auto& [v, mv] : it->second) {
      if (!version || v == *version) gone.push_back(mv);
    }
    if (version && gone.empty()) {
      return absl::NotFoundError(absl::StrCat("model '", name, "' has no loaded version ", *version));
    }
    if (version) it->second.erase(*version);
    if (!version || it->second.empty()) models_.erase(it);
    NotifyLocked(name);
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
    if (mv->state() == ModelState::kReady) mv->batcher_->Stop();
  }
}

}  // namespace kiln::server
