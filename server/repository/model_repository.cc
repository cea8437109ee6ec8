#include "server/repository/model_repository.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <filesystem>
#include <limits>
#include <system_error>

#include "absl/strings/str_replace.h"
#include "base/file.h"
#include "server/common/crash_point.h"
#include "server/common/echo.h"

namespace kiln::server {
namespace fs = std::filesystem;
std::optional<int64_t> ParseVersionNumber(std::string_view s) {
  int64_t v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || ptr != s.data() + s.size() || v < 1 || s[0] == '0') {
    return std::nullopt;
  }
  return v;
}

namespace {

constexpr char kStaging[] = ".staging";
constexpr char kCommitRecord[] = "commit";

std::optional<int64_t> ParseVersion(const std::string& s) { return ParseVersionNumber(s); }

absl::StatusOr<std::string> ReadText(const fs::path& p) {
  std::optional<std::string> text = ReadWholeFile(p.string());
  if (!text) return absl::InternalError(absl::StrCat("cannot read ", p.string()));
  return *std::move(text);
}

// The commit record: "<name>\n<version>\n". nullopt when absent or not one (a crash while
// writing it leaves only its temporary, which does not count).
std::optional<std::pair<std::string, int64_t>> ReadCommitRecord(const fs::path& dir) {
  const std::optional<std::string> text = ReadWholeFile((dir / kCommitRecord).string());
  if (!text) return std::nullopt;
  const size_t nl = text->find('\n');
  if (nl == std::string::npos || text->back() != '\n') return std::nullopt;
  const std::string name = text->substr(0, nl);
  const auto version = ParseVersion(text->substr(nl + 1, text->size() - nl - 2));
  if (!version || !ValidateModelName(name).ok()) return std::nullopt;
  return std::make_pair(name, *version);
}

int64_t BytesUnder(const fs::path& dir) {
  std::error_code ec;
  int64_t total = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir, ec)) {
    if (e.is_regular_file(ec)) total += static_cast<int64_t>(e.file_size(ec));
  }
  return total;
}

}  // namespace

absl::Status ValidateModelName(const std::string& name) {
  if (name.empty() || name.size() > 128 || name[0] == '.') {
    return absl::InvalidArgumentError(absl::StrCat("invalid model name '", EchoName(name),
                                                   "': 1..128 characters, not starting with '.'"));
  }
  for (char ch : name) {
    if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-' || ch == '.')) {
      return absl::InvalidArgumentError(
          absl::StrCat("invalid model name '", EchoName(name),
                       "': only letters, digits, '_', '-' and '.' are allowed"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> NextVersion(const std::string& name, int64_t newest) {
  if (newest == std::numeric_limits<int64_t>::max()) {
    return absl::OutOfRangeError(absl::StrCat("model '", name, "' has version ", newest,
                                              ", the largest there is: upload with an explicit "
                                              "version instead"));
  }
  return std::max<int64_t>(newest, 0) + 1;
}

StagedModel::~StagedModel() {
  writer_.reset();
  if (committed_) return;  // Recover finishes it at the next start
  std::error_code ec;
  fs::remove_all(dir_, ec);
}

absl::Status StagedModel::Append(std::string_view bytes) {
  if (!writer_) return absl::FailedPreconditionError("the staged upload is finished");
  return writer_->Append(bytes);
}

absl::Status StagedModel::Finish(const std::string& config_yaml) {
  if (!writer_) return absl::FailedPreconditionError("the staged upload is finished");
  bytes_ = writer_->bytes();
  absl::Status closed = writer_->Close();
  writer_.reset();
  RETURN_IF_ERROR(closed);
  // config.yaml is written by Commit, not here: while the upload is built its folder must
  // hold exactly what the version folder will (model.onnx), so that external data the build
  // finds beside the model is found there after a restart too.
  config_yaml_ = config_yaml;
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

fs::path ModelRepository::staging_root() const { return fs::path(root_) / kStaging; }

std::string ModelRepository::ModelPath(const std::string& name, int64_t version) const {
  return (fs::path(root_) / name / std::to_string(version) / "model.onnx").string();
}

absl::Status ModelRepository::RelativePaths(const absl::Status& s) const {
  if (s.ok()) return s;
  std::string message(s.message());
  std::error_code ec;
  // The root as configured and as the system spells it (absolute, links resolved), each
  // with its separator so that what is left reads as a relative path.
  for (fs::path root : {fs::path(root_), fs::weakly_canonical(fs::absolute(root_, ec), ec)}) {
    std::string prefix = root.string();
    while (prefix.size() > 1 && prefix.back() == '/') prefix.pop_back();
    if (prefix.empty() || prefix == ".") continue;
    prefix += '/';
    message = absl::StrReplaceAll(message, {{prefix, ""}});
  }
  return absl::Status(s.code(), message);
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
  ASSIGN_OR_RETURN(m.config_yaml, ReadConfig(name));
  return m;
}

absl::StatusOr<std::string> ModelRepository::ReadConfig(const std::string& name) const {
  RETURN_IF_ERROR(ValidateModelName(name));
  const fs::path p = fs::path(root_) / name / "config.yaml";
  std::error_code ec;
  const fs::file_status st = fs::status(p, ec);
  if (st.type() == fs::file_type::not_found) return std::string();
  // A FIFO or folder named config.yaml is not "no config": the model would load with the
  // defaults instead of what its operator meant.
  if (!fs::is_regular_file(st)) {
    return absl::InvalidArgumentError(absl::StrCat(name, "/config.yaml is not a regular file"));
  }
  return ReadText(p);
}

absl::StatusOr<std::vector<RepositoryModel>> ModelRepository::Scan(
    std::vector<std::string>* skipped) const {
  std::error_code ec;
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(root_, ec)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_directory(ec) && name[0] != '.') names.push_back(name);
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

absl::StatusOr<std::unique_ptr<StagedModel>> ModelRepository::Stage() const {
  static std::atomic<uint64_t> counter{0};
  std::error_code ec;
  fs::create_directories(staging_root(), ec);
  if (ec) return FileError(ec.value(), absl::StrCat("cannot create ", staging_root().string()));
  // Unique per process and call; mkdir fails rather than share a folder with anyone.
  const fs::path dir = staging_root() / absl::StrCat("upload.", ::getpid(), ".", counter++);
  if (::mkdir(dir.c_str(), 0755) != 0) {
    return FileError(errno, absl::StrCat("cannot create ", dir.string()));
  }
  auto writer = FileWriter::Create(dir / "model.onnx");
  if (!writer.ok()) {
    fs::remove_all(dir, ec);
    return writer.status();
  }
  return std::unique_ptr<StagedModel>(new StagedModel(dir, std::move(*writer)));
}

absl::Status ModelRepository::Commit(StagedModel& staged, const std::string& name,
                                     int64_t version) {
  RETURN_IF_ERROR(ValidateModelName(name));
  if (version < 1) {
    return absl::InvalidArgumentError(absl::StrCat("model version must be >= 1, got ", version));
  }
  if (staged.writer_) return absl::FailedPreconditionError("the staged upload is not finished");
  // The destination folder first: on a full disk this fails while nothing has changed.
  const fs::path dest = fs::path(root_) / name / std::to_string(version);
  std::error_code ec;
  fs::create_directories(dest, ec);
  if (ec) return FileError(ec.value(), absl::StrCat("cannot create ", dest.string()));
  // Folders this commit created go again when it fails before anything is in place
  // (fs::remove deletes only empty ones).
  auto undo = [&](absl::Status s) {
    fs::remove(dest, ec);
    fs::remove(dest.parent_path(), ec);
    return s;
  };
  if (!staged.config_yaml_.empty()) {
    // Before the record: without one, Recover deletes it with the rest of the folder.
    absl::Status config = WriteFileAtomically(staged.dir_ / "config.yaml", staged.config_yaml_);
    if (!config.ok()) return undo(config);
  }
  absl::Status recorded =
      WriteFileAtomically(staged.dir_ / kCommitRecord, absl::StrCat(name, "\n", version, "\n"));
  if (!recorded.ok()) return undo(recorded);
  staged.committed_ = true;
  CrashPoint("commit-recorded");
  absl::Status moved = RenameFile(staged.dir_ / "model.onnx", dest / "model.onnx");
  if (!moved.ok()) {
    // Nothing is in place yet: without its record the staged folder goes as uncommitted.
    fs::remove(staged.dir_ / kCommitRecord, ec);
    staged.committed_ = static_cast<bool>(ec);
    return undo(moved);
  }
  CrashPoint("commit-model-moved");
  // From here the model is in place; a config.yaml that cannot move now stays recorded and
  // moves at the next start (Recover), as after a crash.
  absl::Status rest = MoveIntoPlace(staged.dir_, name, version);
  if (!rest.ok())
    spdlog::error("commit of {} version {}: {}", name, version, std::string(rest.message()));
  return absl::OkStatus();
}

// Moves what a committed staging folder still holds into place and removes the folder.
// Idempotent: Recover runs it again on a folder a crash left half moved.
absl::Status ModelRepository::MoveIntoPlace(const fs::path& staged, const std::string& name,
                                            int64_t version) {
  const fs::path dest = fs::path(root_) / name / std::to_string(version);
  std::error_code ec;
  if (fs::exists(staged / "model.onnx", ec)) {
    fs::create_directories(dest, ec);
    RETURN_IF_ERROR(RenameFile(staged / "model.onnx", dest / "model.onnx"));
  }
  if (fs::exists(staged / "config.yaml", ec)) {
    RETURN_IF_ERROR(RenameFile(staged / "config.yaml", fs::path(root_) / name / "config.yaml"));
  }
  fs::remove_all(staged, ec);
  return absl::OkStatus();
}

absl::StatusOr<int64_t> ModelRepository::Store(const std::string& name,
                                               std::optional<int64_t> version,
                                               const std::string& onnx_bytes,
                                               const std::string& config_yaml) {
  RETURN_IF_ERROR(ValidateModelName(name));
  if (!version) {
    auto existing = Find(name);
    ASSIGN_OR_RETURN(version, NextVersion(name, existing.ok() ? existing->versions.back() : 0));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<StagedModel> staged, Stage());
  RETURN_IF_ERROR(staged->Append(onnx_bytes));
  RETURN_IF_ERROR(staged->Finish(config_yaml));
  RETURN_IF_ERROR(Commit(*staged, name, *version));
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

std::vector<std::string> ModelRepository::Recover() {
  std::vector<std::string> notes;
  RecoverStaging(notes);
  RemoveLeftovers(notes);
  return notes;
}

void ModelRepository::RecoverStaging(std::vector<std::string>& notes) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(staging_root(), ec)) {
    const fs::path dir = entry.path();
    if (auto record = ReadCommitRecord(dir)) {
      absl::Status s = MoveIntoPlace(dir, record->first, record->second);
      notes.push_back(s.ok() ? absl::StrCat("finished the interrupted commit of ", record->first,
                                            " version ", record->second)
                             : absl::StrCat("cannot finish a commit: ", s.message()));
    } else {
      notes.push_back(absl::StrCat("removed an unfinished upload (", BytesUnder(dir), " bytes)"));
      fs::remove_all(dir, ec);
    }
  }
}

// Temporary files (a crash during an atomic write) and empty version folders, one and two
// levels down: <name>/.config.yaml.tmp.*, <name>/<version>/.model.onnx.tmp.*.
void ModelRepository::RemoveLeftovers(std::vector<std::string>& notes) {
  std::error_code ec;
  for (const auto& model : fs::directory_iterator(root_, ec)) {
    const std::string name = model.path().filename().string();
    if (!model.is_directory(ec) || name[0] == '.') continue;
    std::vector<fs::path> dirs = {model.path()};
    for (const auto& sub : fs::directory_iterator(model.path(), ec)) {
      if (sub.is_directory(ec) && ParseVersion(sub.path().filename().string())) {
        dirs.push_back(sub.path());
      }
    }
    for (const fs::path& dir : dirs) {
      for (const auto& f : fs::directory_iterator(dir, ec)) {
        if (!IsTempName(f.path().filename().string())) continue;
        notes.push_back(absl::StrCat("removed the temporary file ", f.path().string()));
        fs::remove(f.path(), ec);
      }
    }
    for (size_t i = 1; i < dirs.size(); ++i) {
      if (fs::is_empty(dirs[i], ec) && fs::remove(dirs[i], ec)) {
        notes.push_back(absl::StrCat("removed the empty folder ", dirs[i].string()));
      }
    }
  }
}

}  // namespace kiln::server
