// A whole file mapped into memory, read-only in effect (private, copy-on-write).
//
// Why not read(): on this project's VMs the first touch of a freshly allocated 4 KB page
// costs ~14 us (100 MB: ~370 ms), so reading a 100 MB model into a new buffer costs more than
// the read itself. A mapping of a file in the page cache is faulted in 16 pages at a time and
// its pages are shared with the cache (100 MB: ~50 ms), and nothing is copied.
//
// The mapping is private and writable so that a writer that ignores the const-ness of what it
// was given gets its own copy of the page and never changes the file. The file must not be
// truncated while mapped (reading past the new end raises SIGBUS): Kiln's own files are
// replaced by renaming a new file over them, which leaves a mapped one intact.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"

namespace kiln::server {

class MappedFile {
 public:
  // NOT_FOUND when the file cannot be opened; an empty file maps to empty bytes.
  static absl::StatusOr<std::shared_ptr<const MappedFile>> Open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::string_view bytes() const { return {static_cast<const char*>(data_), size_}; }
  // The same bytes, writable (copy-on-write; see above): for a Tensor view's data pointer.
  char* mutable_data() const { return static_cast<char*>(data_); }

 private:
  MappedFile(void* data, size_t size) : data_(data), size_(size) {}
  void* data_;
  size_t size_;
};

}  // namespace kiln::server
