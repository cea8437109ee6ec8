#include "server/json.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"

namespace kiln::server::json {

const char* KindName(Kind k) {
  switch (k) {
    case Kind::kNull:
      return "null";
    case Kind::kBool:
      return "a boolean";
    case Kind::kNumber:
      return "a number";
    case Kind::kString:
      return "a string";
    case Kind::kArray:
      return "an array";
    case Kind::kObject:
      return "an object";
  }
  return "?";
}

const Value* Value::Find(std::string_view key) const {
  for (const auto& [k, v] : members_) {
    if (k == key) return &v;
  }
  return nullptr;
}

// Recursive descent over the text; depth is bounded by Limits, so recursion is too.
class Parser {
 public:
  Parser(std::string_view text, const Limits& limits) : s_(text), limits_(limits) {}

  absl::StatusOr<Value> ParseDocument() {
    Value v;
    RETURN_IF_ERROR(ParseValue(v, 0));
    SkipSpace();
    if (pos_ != s_.size()) return Error("unexpected text after the JSON value");
    return v;
  }

 private:
  absl::Status Error(const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat("malformed JSON at byte ", pos_, ": ", what));
  }
  void SkipSpace() {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) {
      ++pos_;
    }
  }
  bool Consume(std::string_view word) {
    if (s_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  absl::Status ParseValue(Value& v, int depth) {
    SkipSpace();
    if (pos_ >= s_.size()) return Error("unexpected end of input");
    const char c = s_[pos_];
    if (c == '{' || c == '[') {
      if (depth >= limits_.max_depth) {
        return Error(absl::StrCat("nested deeper than ", limits_.max_depth, " levels"));
      }
      return c == '{' ? ParseObject(v, depth + 1) : ParseArray(v, depth + 1);
    }
    if (c == '"') {
      v.kind_ = Kind::kString;
      return ParseString(v.text_);
    }
    if (Consume("true") || Consume("false")) {
      v.kind_ = Kind::kBool;
      v.boolean_ = c == 't';
      return absl::OkStatus();
    }
    if (Consume("null")) return absl::OkStatus();
    return ParseNumber(v);
  }

  absl::Status ParseObject(Value& v, int depth) {
    v.kind_ = Kind::kObject;
    ++pos_;  // '{'
    SkipSpace();
    if (pos_ < s_.size() && s_[pos_] == '}') {
      ++pos_;
      return absl::OkStatus();
    }
    while (true) {
      SkipSpace();
      if (pos_ >= s_.size() || s_[pos_] != '"') return Error("expected a member name");
      std::pair<std::string, Value> member;
      RETURN_IF_ERROR(ParseString(member.first));
      SkipSpace();
      if (pos_ >= s_.size() || s_[pos_] != ':') return Error("expected ':'");
      ++pos_;
      RETURN_IF_ERROR(ParseValue(member.second, depth));
      v.members_.push_back(std::move(member));
      SkipSpace();
      if (pos_ < s_.size() && s_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < s_.size() && s_[pos_] == '}') {
        ++pos_;
        return CheckUniqueNames(v.members_);
      }
      return Error("expected ',' or '}'");
    }
  }

  // RFC 8259 leaves a repeated member name to the reader, and readers differ (first, last,
  // both): a proxy and kilnd could then act on different requests. So it is refused. Sorted
  // names, not pairs, so that an object with many members costs n log n.
  absl::Status CheckUniqueNames(const std::vector<std::pair<std::string, Value>>& members) const {
    if (members.size() < 2) return absl::OkStatus();
    std::vector<std::string_view> names;
    names.reserve(members.size());
    for (const auto& m : members) names.push_back(m.first);
    std::sort(names.begin(), names.end());
    const auto twice = std::adjacent_find(names.begin(), names.end());
    if (twice == names.end()) return absl::OkStatus();
    const absl::string_view name(twice->data(), std::min<size_t>(twice->size(), 64));
    return Error(absl::StrCat("member '", name, twice->size() > 64 ? "...'" : "'",
                              " appears twice in an object"));
  }

  absl::Status ParseArray(Value& v, int depth) {
    v.kind_ = Kind::kArray;
    ++pos_;  // '['
    SkipSpace();
    if (pos_ < s_.size() && s_[pos_] == ']') {
      ++pos_;
      return absl::OkStatus();
    }
    while (true) {
      v.items_.emplace_back();
      RETURN_IF_ERROR(ParseValue(v.items_.back(), depth));
      SkipSpace();
      if (pos_ < s_.size() && s_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < s_.size() && s_[pos_] == ']') {
        ++pos_;
        return absl::OkStatus();
      }
      return Error("expected ',' or ']'");
    }
  }

  absl::Status ParseNumber(Value& v) {
    const size_t start = pos_;
    if (Consume("NaN") || Consume("Infinity") || Consume("-Infinity")) {
      v.kind_ = Kind::kNumber;
      v.text_ = std::string(s_.substr(start, pos_ - start));
      return absl::OkStatus();
    }
    auto digits = [&] {
      const size_t from = pos_;
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
      return pos_ > from;
    };
    if (pos_ < s_.size() && s_[pos_] == '-') ++pos_;
    if (pos_ < s_.size() && s_[pos_] == '0') {
      ++pos_;
    } else if (!digits()) {
      pos_ = start;
      return Error("expected a value");
    }
    if (pos_ < s_.size() && s_[pos_] == '.') {
      ++pos_;
      if (!digits()) return Error("expected digits after '.'");
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      if (!digits()) return Error("expected digits in the exponent");
    }
    v.kind_ = Kind::kNumber;
    v.text_ = std::string(s_.substr(start, pos_ - start));
    return absl::OkStatus();
  }

  absl::StatusOr<uint32_t> Hex4() {
    if (pos_ + 4 > s_.size()) return Error("truncated \\u escape");
    uint32_t code = 0;
    auto [ptr, ec] = std::from_chars(s_.data() + pos_, s_.data() + pos_ + 4, code, 16);
    if (ec != std::errc() || ptr != s_.data() + pos_ + 4) return Error("bad \\u escape");
    pos_ += 4;
    return code;
  }

  static void AppendUtf8(uint32_t cp, std::string& out) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  absl::Status ParseUnicodeEscape(std::string& out) {
    ASSIGN_OR_RETURN(uint32_t cp, Hex4());
    if (cp >= 0xD800 && cp <= 0xDBFF) {  // a high surrogate: its low half must follow
      if (!Consume("\\u")) return Error("unpaired surrogate in \\u escape");
      ASSIGN_OR_RETURN(const uint32_t low, Hex4());
      if (low < 0xDC00 || low > 0xDFFF) return Error("unpaired surrogate in \\u escape");
      cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
    } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
      return Error("unpaired surrogate in \\u escape");
    }
    AppendUtf8(cp, out);
    return absl::OkStatus();
  }

  absl::Status ParseString(std::string& out) {
    ++pos_;  // '"'
    while (true) {
      const size_t run = pos_;
      while (pos_ < s_.size() && s_[pos_] != '"' && s_[pos_] != '\\' &&
             static_cast<unsigned char>(s_[pos_]) >= 0x20) {
        ++pos_;
      }
      out.append(s_.substr(run, pos_ - run));
      if (pos_ >= s_.size()) return Error("unterminated string");
      const char c = s_[pos_++];
      if (c == '"') return absl::OkStatus();
      if (c != '\\') return Error("control character in a string");
      if (pos_ >= s_.size()) return Error("unterminated string");
      const char e = s_[pos_++];
      switch (e) {
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u':
          RETURN_IF_ERROR(ParseUnicodeEscape(out));
          break;
        default:
          return Error("bad escape in a string");
      }
    }
  }

  std::string_view s_;
  const Limits limits_;
  size_t pos_ = 0;
};

absl::StatusOr<Value> Parse(std::string_view text, const Limits& limits) {
  return Parser(text, limits).ParseDocument();
}

namespace {

absl::Status NotA(const Value& v, const std::string& what, const std::string& want) {
  const std::string shown = v.kind() == Kind::kNumber || v.kind() == Kind::kString
                                ? absl::StrCat(" ", Quote(v.text().substr(0, 32)))
                                : "";
  return absl::InvalidArgumentError(
      absl::StrCat(what, ": expected ", want, ", got ", KindName(v.kind()), shown));
}

template <class T>
absl::StatusOr<T> AsInteger(const Value& v, const std::string& what, const std::string& want) {
  if (v.kind() != Kind::kNumber) return NotA(v, what, want);
  const std::string& t = v.text();
  T out{};
  auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), out);
  if (ec != std::errc() || ptr != t.data() + t.size()) return NotA(v, what, want);
  return out;
}

}  // namespace

absl::StatusOr<int64_t> AsInt64(const Value& v, const std::string& what) {
  return AsInteger<int64_t>(v, what, "an integer in the INT64 range");
}

absl::StatusOr<uint64_t> AsUInt64(const Value& v, const std::string& what) {
  return AsInteger<uint64_t>(v, what, "a non-negative integer in the UINT64 range");
}

absl::StatusOr<double> AsDouble(const Value& v, const std::string& what) {
  if (v.kind() != Kind::kNumber) return NotA(v, what, "a number");
  const std::string& t = v.text();
  if (t == "NaN") return std::numeric_limits<double>::quiet_NaN();
  if (t == "Infinity") return std::numeric_limits<double>::infinity();
  if (t == "-Infinity") return -std::numeric_limits<double>::infinity();
  double out = 0;
  auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), out);
  // Out of range (1e999) saturates rather than failing: it is a number, just a large one.
  if (ec == std::errc::result_out_of_range) return t[0] == '-' ? -HUGE_VAL : HUGE_VAL;
  if (ec != std::errc() || ptr != t.data() + t.size()) return NotA(v, what, "a number");
  return out;
}

std::string Quote(std::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  out += '"';
  return out;
}

void Writer::Separate() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (!first_.empty()) {
    if (!first_.back()) out_ += ',';
    first_.back() = false;
  }
}

Writer& Writer::Open(char c) {
  Separate();
  out_ += c;
  first_.push_back(true);
  return *this;
}

Writer& Writer::Close(char c) {
  out_ += c;
  if (!first_.empty()) first_.pop_back();
  return *this;
}

Writer& Writer::Key(std::string_view key) {
  Separate();
  out_ += Quote(key);
  out_ += ':';
  after_key_ = true;
  return *this;
}

Writer& Writer::String(std::string_view s) {
  Separate();
  out_ += Quote(s);
  return *this;
}

Writer& Writer::Int(int64_t v) {
  Separate();
  absl::StrAppend(&out_, v);
  return *this;
}

Writer& Writer::UInt(uint64_t v) {
  Separate();
  absl::StrAppend(&out_, v);
  return *this;
}

namespace {

template <class F>
void AppendFloating(F v, std::string& out) {
  if (std::isnan(v)) {
    out += "NaN";
  } else if (std::isinf(v)) {
    out += v < 0 ? "-Infinity" : "Infinity";
  } else {
    char buf[64];
    auto [ptr, ec] = std::to_chars(buf, buf + sizeof buf, v);
    out.append(buf, ec == std::errc() ? ptr : buf);
  }
}

}  // namespace

Writer& Writer::Double(double v) {
  Separate();
  AppendFloating(v, out_);
  return *this;
}

Writer& Writer::Float(float v) {
  Separate();
  AppendFloating(v, out_);
  return *this;
}

Writer& Writer::Bool(bool v) {
  Separate();
  out_ += v ? "true" : "false";
  return *this;
}

Writer& Writer::Null() {
  Separate();
  out_ += "null";
  return *this;
}

}  // namespace kiln::server::json
