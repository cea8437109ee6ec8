// The model repository on disk:
//   <root>/<name>/config.yaml          optional, the model's config (keys of model_defaults)
//   <root>/<name>/<version>/model.onnx  version: a positive integer; the newest serves by default
//   <root>/.staging/<id>/               uploads on their way in (never read as models)
// An upload is written to its own staging folder (model.onnx, then config.yaml at commit:
// while it is built the folder holds only what its version folder will), and only a
// successful load commits it: a commit record is written in the folder, then the files are
// renamed into place. A crash before the record leaves a folder that Recover() deletes; a
// crash after it, one that Recover() finishes. So a restart finds each model either as it
// was before the upload or as the upload made it, never a part, and never a model that
// failed to load.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "server/common/files.h"

namespace kiln::server {

// A version number as folders and requests spell it: a decimal integer >= 1 without a
// leading zero ("01" is not version 1: the folder would not be found by that name).
std::optional<int64_t> ParseVersionNumber(std::string_view s);

struct RepositoryModel {
  std::string name;
  std::vector<int64_t> versions;  // ascending; versions without model.onnx are skipped
  std::string config_yaml;        // empty when the model has no config.yaml
};

// Names are used as folder names: [A-Za-z0-9_.-], 1..128 chars, not starting with '.'.
absl::Status ValidateModelName(const std::string& name);

// The version after `newest` (0: none yet); OUT_OF_RANGE when `newest` is the largest int64.
absl::StatusOr<int64_t> NextVersion(const std::string& name, int64_t newest);

class ModelRepository;

// An upload being staged: <root>/.staging/<id>/model.onnx, streamed, plus config.yaml.
// Nothing outside its folder changes until ModelRepository::Commit. Destroyed uncommitted, it
// removes its folder. Not thread-safe (one upload, one thread).
class StagedModel {
 public:
  ~StagedModel();
  StagedModel(const StagedModel&) = delete;
  StagedModel& operator=(const StagedModel&) = delete;

  absl::Status Append(std::string_view bytes);  // to model.onnx
  // Closes model.onnx and keeps `config_yaml` for Commit (which writes it when non-empty).
  absl::Status Finish(const std::string& config_yaml);
  std::string model_path() const { return (dir_ / "model.onnx").string(); }
  const std::string& config_yaml() const { return config_yaml_; }
  int64_t bytes() const { return writer_ ? writer_->bytes() : bytes_; }

 private:
  friend class ModelRepository;
  StagedModel(std::filesystem::path dir, FileWriter writer)
      : dir_(std::move(dir)), writer_(std::move(writer)) {}
  const std::filesystem::path dir_;
  std::optional<FileWriter> writer_;  // open until Finish
  int64_t bytes_ = 0;                 // model.onnx's size once finished
  std::string config_yaml_;
  bool committed_ = false;  // set once the commit record exists: the folder then rolls forward
};

// Thread-safe for distinct names and for reads; writes to one name (Commit, Remove) must be
// serialized by the caller (the registry holds a lock per name).
class ModelRepository {
 public:
  // Creates `root` if it does not exist.
  static absl::StatusOr<ModelRepository> Open(const std::string& root);

  const std::string& root() const { return root_; }
  // Every model folder with at least one version, sorted by name. Folders that are not valid
  // model names or hold no version are skipped (with the reason in `skipped`); hidden ones
  // (.staging) silently.
  absl::StatusOr<std::vector<RepositoryModel>> Scan(
      std::vector<std::string>* skipped = nullptr) const;
  absl::StatusOr<RepositoryModel> Find(const std::string& name) const;
  // The model's config.yaml, empty when there is none (or no such model).
  absl::StatusOr<std::string> ReadConfig(const std::string& name) const;
  std::string ModelPath(const std::string& name, int64_t version) const;
  // `s` with the repository's own path cut from its message ("<root>/m/1/model.onnx" reads
  // "m/1/model.onnx"): errors and /readyz reach clients, who have no business knowing where
  // the server keeps its files.
  absl::Status RelativePaths(const absl::Status& s) const;

  // Opens a new staging folder for an upload.
  absl::StatusOr<std::unique_ptr<StagedModel>> Stage() const;
  // Moves a finished upload into place as `name` version `version` (replacing that version's
  // model.onnx, and config.yaml when the upload has one). Once this returns OK or a crash
  // happened after its commit record, the upload is in the repository (Recover finishes it).
  absl::Status Commit(StagedModel& staged, const std::string& name, int64_t version);
  // Stage + Commit in one call. `version` absent: one above the newest stored version.
  absl::StatusOr<int64_t> Store(const std::string& name, std::optional<int64_t> version,
                                const std::string& onnx_bytes, const std::string& config_yaml);
  // Deletes one version's folder, or the whole model when `version` is absent.
  absl::Status Remove(const std::string& name, std::optional<int64_t> version);

  // At start, before anything else touches the repository: finishes interrupted commits,
  // deletes unfinished uploads, temporary files and empty version folders. Returns one line
  // per thing it did (for the log).
  std::vector<std::string> Recover();

 private:
  explicit ModelRepository(std::string root) : root_(std::move(root)) {}
  std::filesystem::path staging_root() const;
  absl::Status MoveIntoPlace(const std::filesystem::path& staged, const std::string& name,
                             int64_t version);
  void RecoverStaging(std::vector<std::string>& notes);
  void RemoveLeftovers(std::vector<std::string>& notes);
  std::string root_;
};

}  // namespace kiln::server
