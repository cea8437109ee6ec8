// Reading a whole file into memory: the one reader the model importer, the server (config,
// repository, engine cache, TLS files) and the load generator share.
#pragma once

#include <fstream>
#include <optional>
#include <sstream>
#include <string>

namespace kiln {

// The file's bytes; nullopt when it cannot be opened or a read fails. Callers word their own
// error (which file, which setting) since only they know what the file was for.
inline std::optional<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream os;
  os << in.rdbuf();
  if (in.bad()) return std::nullopt;
  return std::move(os).str();
}

}  // namespace kiln
