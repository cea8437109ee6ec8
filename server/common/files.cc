#include "server/common/files.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "server/common/crash_point.h"

namespace kiln::server {
namespace fs = std::filesystem;

fs::path TempNameFor(const fs::path& dest) {
  static std::atomic<uint64_t> counter{0};
  return dest.parent_path() /
         absl::StrCat(".", dest.filename().string(), ".tmp.", ::getpid(), ".", counter++);
}

bool IsTempName(const std::string& filename) {
  return filename.size() > 1 && filename[0] == '.' && filename.find(".tmp.") != std::string::npos;
}

absl::Status FileError(int err, const std::string& what) {
  const std::string text = absl::StrCat(what, ": ", std::strerror(err));
  if (err == ENOSPC || err == EDQUOT || err == EFBIG) return absl::ResourceExhaustedError(text);
  return absl::InternalError(text);
}

absl::StatusOr<FileWriter> FileWriter::Create(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return FileError(errno, absl::StrCat("cannot create ", path.string()));
  return FileWriter(fd, path);
}

FileWriter::FileWriter(FileWriter&& other) noexcept
    : fd_(other.fd_), path_(std::move(other.path_)), bytes_(other.bytes_) {
  other.fd_ = -1;
}

FileWriter::~FileWriter() {
  if (fd_ >= 0) ::close(fd_);
}

absl::Status FileWriter::Append(std::string_view bytes) {
  if (fd_ < 0) return absl::InternalError(absl::StrCat(path_.string(), " is closed"));
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd_, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      return FileError(n < 0 ? errno : EIO, absl::StrCat("cannot write ", path_.string()));
    bytes.remove_prefix(static_cast<size_t>(n));
    bytes_ += n;
  }
  return absl::OkStatus();
}

absl::Status FileWriter::Close() {
  if (fd_ < 0) return absl::OkStatus();
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) return FileError(errno, absl::StrCat("cannot write ", path_.string()));
  return absl::OkStatus();
}

absl::Status WriteFileAtomically(const fs::path& dest, std::string_view bytes) {
  return WriteFileAtomically(dest, {bytes});
}

absl::Status WriteFileAtomically(const fs::path& dest,
                                 std::initializer_list<std::string_view> parts,
                                 const char* crash_point) {
  const fs::path tmp = TempNameFor(dest);
  absl::Status s;
  {
    auto w = FileWriter::Create(tmp);
    if (!w.ok()) return w.status();
    for (const std::string_view part : parts) {
      if (s.ok()) s = w->Append(part);
    }
    if (s.ok()) s = w->Close();
  }
  if (s.ok() && crash_point) CrashPoint(crash_point);
  if (s.ok()) s = RenameFile(tmp, dest);
  if (!s.ok()) {
    std::error_code ec;
    fs::remove(tmp, ec);
  }
  return s;
}

absl::Status RenameFile(const fs::path& from, const fs::path& to) {
  if (std::rename(from.c_str(), to.c_str()) != 0) {
    return FileError(errno, absl::StrCat("cannot rename ", from.string(), " to ", to.string()));
  }
  return absl::OkStatus();
}

}  // namespace kiln::server
