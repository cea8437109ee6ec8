#include "server/model_repository.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <system_error>
#include <unistd.h>

#include "base/file.h"

namespace kiln::server {
namespace fs = std::filesystem;
namespace {

std::optional<int64_t> ParseVersion(const std::string& s) {
  int64_t v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size() || v < 1 || s[0] == '0') return std::nullopt;
  return v;
}

absl::StatusOr<std::string> ReadText(const fs::path& p) {
  std::optional<std::string> text = ReadWholeFile(p.string());
  if (!text) return absl::InternalError(absl::StrCat("cannot read ", p.string()));
  return *std::move(text);
}

// Writes to a unique temporary name in the same folder, flushes, then renames over `dest`
// (rename within one filesystem is atomic).
absl::Status WriteAtomically(const fs::path& dest, const std::string& bytes) {
  const fs::path tmp = dest.parent_path() / absl::StrCat(".", dest.filename().string(), ".tmp.",
                                                         ::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.flush();
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", tmp.string()));
  }
  std::error_code ec;
  fs::rename(tmp, dest, ec);
  if (ec) {
    fs::remove(tmp, ec);
    return absl::InternalError(absl::StrCat("cannot rename into ", dest.string()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateModelName(const std::string& name) {
  if (name.empty() || name.size() > 128 || name[0] == '.') {
    return absl::InvalidArgumentError(absl::StrCat(
        "invalid model name '", name, "': 1..128 characters, not starting with '.'"));
  }
  for (char ch : name) {
    if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-' || ch == '.')) {
      return absl::InvalidArgumentError(absl::StrCat(
          "invalid model name '", name, "': only letters, digits, '_', '-' and '.' are allowed"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ModelRepository> ModelRepository::Open(const std::string& root) {
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec || !fs::is_directory(root)) {
    return absl::InvalidArgumentError(
        absl::StrCat("model repository '", root, "' is not a usable directory"));
  }
  return ModelRepository(root);
}

std::string ModelRepository::ModelPath(const std::string& name, int64_t version) const {
  return (fs::path(root_) / name / std::to_string(version) / "model.onnx").string();
}

absl::StatusOr<RepositoryModel> ModelRepository::Find(const std::string& name) const {
  RETURN_IF_ERROR(ValidateModelName(name));
  const fs::path dir = fs::path(root_) / name;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return absl::NotFoundError(absl::StrCat("model '", name, "' is not in the repository"));
  }
  RepositoryModel m;
  m.name = name;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    auto v = ParseVersion(entry.path().filename().string());
    if (v && fs::is_regular_file(entry.path() / "model.onnx", ec)) m.versions.push_back(*v);
  }
  std::sort(m.versions.begin(), m.versions.end());
  if (m.versions.empty()) {
    return absl::NotFoundError(absl::StrCat("model '", name, "' has no <version>/model.onnx"));
  }
  if (fs::is_regular_file(dir / "config.yaml", ec)) {
    ASSIGN_OR_RETURN(m.config_yaml, ReadText(dir / "config.yaml"));
  }
  return m;
}

absl::StatusOr<std::vector<RepositoryModel>> ModelRepository::Scan(
    std::vector<std::string>* skipped) const {
  std::error_code ec;
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(root_, ec)) {
    if (entry.is_directory(ec)) names.push_back(entry.path().filename().string());
  }
  if (ec) return absl::InternalError(absl::StrCat("cannot list ", root_, ": ", ec.message()));
  std::sort(names.begin(), names.end());
  std::vector<RepositoryModel> out;
  for (const std::string& name : names) {
    auto m = Find(name);
    if (m.ok()) {
      out.push_back(std::move(*m));
    } else if (skipped) {
      skipped->push_back(std::string(m.status().message()));
    }
  }
  return out;
}

absl::StatusOr<int64_t> ModelRepository::Store(const std::string& name,
                                               std::optional<int64_t> version,
                                               const std::string& onnx_bytes,
                                               const std::string& config_yaml) {
  RETURN_IF_ERROR(ValidateModelName(name));
  if (version && *version < 1) {
    return absl::InvalidArgumentError(absl::StrCat("model version must be >= 1, got ", *version));
  }
  if (!version) {
    auto existing = Find(name);
    version = existing.ok() ? existing->versions.back() + 1 : 1;
  }
  const fs::path dir = fs::path(root_) / name / std::to_string(*version);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", dir.string()));
  if (!config_yaml.empty()) {
    RETURN_IF_ERROR(WriteAtomically(fs::path(root_) / name / "config.yaml", config_yaml));
  }
  RETURN_IF_ERROR(WriteAtomically(dir / "model.onnx", onnx_bytes));
  return *version;
}

absl::Status ModelRepository::Remove(const std::string& name, std::optional<int64_t> version) {
  RETURN_IF_ERROR(ValidateModelName(name));
  fs::path p = fs::path(root_) / name;
  if (version) p /= std::to_string(*version);
  std::error_code ec;
  fs::remove_all(p, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot remove ", p.string()));
  return absl::OkStatus();
}

absl::Status ModelRepository::SetConfig(const std::string& name, const std::string& yaml) {
  RETURN_IF_ERROR(ValidateModelName(name));
  const fs::path p = fs::path(root_) / name / "config.yaml";
  if (!yaml.empty()) return WriteAtomically(p, yaml);
  std::error_code ec;
  fs::remove(p, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot remove ", p.string()));
  return absl::OkStatus();
}

}  // namespace kiln::server
