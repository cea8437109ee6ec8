// Reading a whole file into memory: the one reader the model importer, the server (config,
// repository, engine cache, TLS files) and the load generator share.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <optional>
#include <string>

namespace kiln {

// Whether `fd` is a regular file. A FIFO, socket or device named where a model, its
// external data or a config belongs would block a reader forever (a FIFO with no writer) or
// never end (/dev/zero); every reader of the repository refuses them. (/proc files are
// regular.)
inline bool IsRegularFile(int fd) {
  struct stat st;
  return ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
}

// Opens `path` for reading without blocking on a FIFO; -1 (errno set) when it cannot, or
// with EINVAL when it is not a regular file. The descriptor is blocking once returned.
inline int OpenRegularFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return -1;
  if (!IsRegularFile(fd)) {
    ::close(fd);
    errno = EINVAL;
    return -1;
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

// The bytes of a regular file; nullopt when it cannot be opened, is not a regular file, or a
// read fails. Callers word their own error (which file, which setting) since only they know
// what the file was for.
inline std::optional<std::string> ReadWholeFile(const std::string& path) {
  const int fd = OpenRegularFile(path);
  if (fd < 0) return std::nullopt;
  // One buffer of the size the file reports, read at once: a buffer grown as bytes arrive
  // copies a 100 MB model several times over. Then whatever lies beyond that size: a file
  // that grew, or one that reports none (/proc).
  struct stat st;
  std::string out(::fstat(fd, &st) == 0 ? static_cast<size_t>(st.st_size) : 0, '\0');
  size_t got = 0;
  char more[16 << 10];
  while (true) {
    const bool sized = got < out.size();
    const ssize_t n =
        sized ? ::read(fd, out.data() + got, out.size() - got) : ::read(fd, more, sizeof more);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      ::close(fd);
      return std::nullopt;
    }
    if (n == 0) break;
    if (!sized) out.append(more, static_cast<size_t>(n));
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  out.resize(got);
  return out;
}

}  // namespace kiln
