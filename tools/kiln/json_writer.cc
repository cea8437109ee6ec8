#include "tools/kiln/json_writer.h"

#include <cmath>
#include <cstdio>

namespace kiln::tools {

std::string JsonEscape(const std::string& s) {
  std::string o;
  for (unsigned char c : s) {
    switch (c) {
      case '"': o += "\\\""; break;
      case '\\': o += "\\\\"; break;
      case '\n': o += "\\n"; break;
      case '\t': o += "\\t"; break;
      case '\r': o += "\\r"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          o += buf;
        } else {
          o += static_cast<char>(c);
        }
    }
  }
  return o;
}

void JsonWriter::Separate() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (!first_.empty()) {
    if (!first_.back()) out_ += ",";
    first_.back() = false;
  }
}

void JsonWriter::Open(char c) {
  Separate();
  out_ += c;
  first_.push_back(true);
}

void JsonWriter::Close(char c) {
  out_ += c;
  first_.pop_back();
}

void JsonWriter::Key(const std::string& k) {
  Separate();
  out_ += "\"" + JsonEscape(k) + "\":";
  after_key_ = true;
}

void JsonWriter::String(const std::string& s) {
  Separate();
  out_ += "\"" + JsonEscape(s) + "\"";
}

void JsonWriter::Number(double v) {
  Separate();
  if (!std::isfinite(v)) {
    out_ += "null";  // JSON has no NaN/Inf
    return;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  out_ += buf;
}

void JsonWriter::Int(int64_t v) {
  Separate();
  out_ += std::to_string(v);
}

void JsonWriter::Bool(bool v) {
  Separate();
  out_ += v ? "true" : "false";
}

}  // namespace kiln::tools
