// The model repository on disk:
//   <root>/<name>/config.yaml          optional, the model's config (keys of model_defaults)
//   <root>/<name>/<version>/model.onnx  version: a positive integer; the newest serves by default
// Uploads are written to a temporary file in the version folder and renamed into place, so a
// crash never leaves a half-written model.onnx for the next start to load.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace kiln::server {

struct RepositoryModel {
  std::string name;
  std::vector<int64_t> versions;  // ascending; versions without model.onnx are skipped
  std::string config_yaml;        // empty when the model has no config.yaml
};

// Names are used as folder names: [A-Za-z0-9_.-], 1..128 chars, not starting with '.'.
absl::Status ValidateModelName(const std::string& name);

// Not thread-safe by itself: the registry serializes writes (one load at a time per name).
class ModelRepository {
 public:
  // Creates `root` if it does not exist.
  static absl::StatusOr<ModelRepository> Open(const std::string& root);

  const std::string& root() const { return root_; }
  // Every model folder with at least one version, sorted by name. Folders that are not valid
  // model names or hold no version are skipped (with the reason in `skipped`).
  absl::StatusOr<std::vector<RepositoryModel>> Scan(std::vector<std::string>* skipped = nullptr) const;
  absl::StatusOr<RepositoryModel> Find(const std::string& name) const;
  std::string ModelPath(const std::string& name, int64_t version) const;

  // Writes model.onnx (and config.yaml when non-empty) atomically. `version` absent: one
  // above the newest existing version. Returns the version written.
  absl::StatusOr<int64_t> Store(const std::string& name, std::optional<int64_t> version,
                                const std::string& onnx_bytes, const std::string& config_yaml);
  // Deletes one version's folder, or the whole model when `version` is absent.
  absl::Status Remove(const std::string& name, std::optional<int64_t> version);
  // Replaces the model's config.yaml atomically (removes it when `yaml` is empty).
  absl::Status SetConfig(const std::string& name, const std::string& yaml);

 private:
  explicit ModelRepository(std::string root) : root_(std::move(root)) {}
  std::string root_;
};

}  // namespace kiln::server
