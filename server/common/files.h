// The file operations the model repository is made of: a writer that streams a file to disk
// and says why a write failed (a full disk is RESOURCE_EXHAUSTED, so a client knows to retry
// elsewhere or later), a whole-file replace under a unique temporary name, and a rename that
// reports errno. Temporary names share one recognisable pattern so a restart can find what a
// crash left behind (ModelRepository::Recover).
#pragma once

#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <string>
#include <string_view>

#include "base/status.h"

namespace kiln::server {

// "<dir>/.<name>.tmp.<pid>.<n>": unique per process and call (concurrent writers of one file
// never share a temporary), and recognised by IsTempName.
std::filesystem::path TempNameFor(const std::filesystem::path& dest);
bool IsTempName(const std::string& filename);

// `what` failed with errno `err`: RESOURCE_EXHAUSTED for a full disk or quota, else INTERNAL.
absl::Status FileError(int err, const std::string& what);

// A new file written front to back. Move-only; the destructor closes (and keeps) the file.
class FileWriter {
 public:
  // Fails if `path` exists: a writer never truncates someone else's file.
  static absl::StatusOr<FileWriter> Create(const std::filesystem::path& path);
  FileWriter(FileWriter&& other) noexcept;
  FileWriter& operator=(FileWriter&&) = delete;
  ~FileWriter();

  absl::Status Append(std::string_view bytes);
  absl::Status Close();  // closing can report a write the kernel deferred
  int64_t bytes() const { return bytes_; }

 private:
  FileWriter(int fd, std::filesystem::path path) : fd_(fd), path_(std::move(path)) {}
  int fd_ = -1;
  std::filesystem::path path_;
  int64_t bytes_ = 0;
};

// Writes `bytes` to a temporary beside `dest` and renames it over `dest` (atomic within one
// file system): readers see the old file or the new one, never a part.
absl::Status WriteFileAtomically(const std::filesystem::path& dest, std::string_view bytes);
// The same for a file made of `parts` in order; `crash_point` (server/common/crash_point.h), when
// given, is reached between the write and the rename.
absl::Status WriteFileAtomically(const std::filesystem::path& dest,
                                 std::initializer_list<std::string_view> parts,
                                 const char* crash_point = nullptr);
absl::Status RenameFile(const std::filesystem::path& from, const std::filesystem::path& to);

}  // namespace kiln::server
