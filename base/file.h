// Reading a whole file into memory: the one reader the model importer, the server (config,
// repository, engine cache, TLS files) and the load generator share.
#pragma once

#include <cstdint>
#include <filesystem>
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
  // One buffer of the size the file reports, read at once: a buffer grown as bytes arrive
  // copies a 100 MB model several times over. (Not by seeking to the end: /proc files
  // refuse that.)
  std::string out;
  std::error_code ec;
  const std::uintmax_t size = std::filesystem::file_size(path, ec);
  if (!ec && size > 0) {
    out.resize(static_cast<size_t>(size));
    in.read(out.data(), static_cast<std::streamsize>(size));
    out.resize(static_cast<size_t>(in.gcount()));
    if (in.bad()) return std::nullopt;
    in.clear();  // a file that shrank meanwhile ends early; that is what it holds now
  }
  // Whatever lies beyond that size: a file that grew, or one that reports none (/proc).
  std::ostringstream rest;
  rest << in.rdbuf();
  if (in.bad()) return std::nullopt;
  out += std::move(rest).str();
  return out;
}

}  // namespace kiln
