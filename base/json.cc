#include "base/json.h"

#include <rapidjson/error/en.h>
#include <rapidjson/memorystream.h>
#include <rapidjson/reader.h>
#include <rapidjson/writer.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <system_error>

#include "absl/strings/str_cat.h"

namespace kiln::json {

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
  for (const auto& [name, value] : members_) {
    if (name == key) return &value;
  }
  return nullptr;
}

// Builds the Value tree from RapidJSON's SAX events. Returning false stops the parse; the
// reason is kept for the error message.
class TreeBuilder : public rapidjson::BaseReaderHandler<rapidjson::UTF8<>, TreeBuilder> {
 public:
  explicit TreeBuilder(const Limits& limits) : limits_(limits) {}

  bool Null() { return Put(Kind::kNull); }
  bool Bool(bool b) {
    Value* v = Put(Kind::kBool);
    if (v) v->boolean_ = b;
    return v;
  }
  bool RawNumber(const char* s, rapidjson::SizeType n, bool) {
    // RapidJSON also takes "Inf", "-NaN" and "Inf.5"; the names are Python's three exactly.
    const std::string_view text(s, n);
    if (text.find_first_of("NI") != std::string_view::npos && text != "NaN" && text != "Infinity" &&
        text != "-Infinity") {
      why_ = absl::StrCat("malformed number '", std::string(text.substr(0, 32)), "'");
      return false;
    }
    return Text(Kind::kNumber, s, n);
  }
  bool String(const char* s, rapidjson::SizeType n, bool) { return Text(Kind::kString, s, n); }
  bool Key(const char* s, rapidjson::SizeType n, bool) {
    if (!ValidText(s, n)) return false;
    open_.back()->members_.emplace_back(std::string(s, n), Value());
    return true;
  }
  bool StartObject() { return Open(Kind::kObject); }
  bool StartArray() { return Open(Kind::kArray); }
  bool EndObject(rapidjson::SizeType) {
    const bool unique = CheckUniqueNames(open_.back()->members_);
    open_.pop_back();
    return unique;
  }
  bool EndArray(rapidjson::SizeType) {
    open_.pop_back();
    return true;
  }

  Value& root() { return root_; }
  const std::string& why() const { return why_; }

 private:
  // The slot the next value fills: the root, an array's new item or the member just named.
  Value* Put(Kind kind) {
    Value* v = &root_;
    if (!open_.empty()) {
      Value& parent = *open_.back();
      v = parent.kind_ == Kind::kArray ? &parent.items_.emplace_back()
                                       : &parent.members_.back().second;
    }
    v->kind_ = kind;
    return v;
  }
  bool Text(Kind kind, const char* s, rapidjson::SizeType n) {
    if (!ValidText(s, n)) return false;
    Put(kind)->text_.assign(s, n);
    return true;
  }
  // The input's bytes are validated as UTF-8 by the reader, but a \u escape of a lone low
  // surrogate ("\udc00") decodes to the UTF-8 form of a surrogate, which no UTF-8 reader
  // (this one included) would take back: refused, as a lone high surrogate already is.
  bool ValidText(const char* s, rapidjson::SizeType n) {
    for (rapidjson::SizeType i = 0; i + 1 < n; ++i) {
      if (static_cast<unsigned char>(s[i]) == 0xED &&
          static_cast<unsigned char>(s[i + 1]) >= 0xA0) {
        why_ = "unpaired surrogate in a \\u escape";
        return false;
      }
    }
    return true;
  }
  bool Open(Kind kind) {
    if (static_cast<int>(open_.size()) >= limits_.max_depth) {
      why_ = absl::StrCat("nested deeper than ", limits_.max_depth, " levels");
      return false;
    }
    open_.push_back(Put(kind));
    return true;
  }
  // Sorted names, not pairs, so that an object with many members costs n log n.
  bool CheckUniqueNames(const std::vector<std::pair<std::string, Value>>& members) {
    if (members.size() < 2) return true;
    std::vector<std::string_view> names;
    names.reserve(members.size());
    for (const auto& m : members) names.push_back(m.first);
    std::sort(names.begin(), names.end());
    const auto twice = std::adjacent_find(names.begin(), names.end());
    if (twice == names.end()) return true;
    why_ = absl::StrCat("member '", std::string(twice->substr(0, 64)),
                        twice->size() > 64 ? "...'" : "'", " appears twice in an object");
    return false;
  }

  Limits limits_;
  Value root_;
  std::vector<Value*> open_;  // the arrays and objects being filled, innermost last
  std::string why_;
};

absl::StatusOr<Value> Parse(std::string_view text, const Limits& limits) {
  constexpr unsigned kFlags = rapidjson::kParseNumbersAsStringsFlag |
                              rapidjson::kParseNanAndInfFlag | rapidjson::kParseIterativeFlag |
                              rapidjson::kParseValidateEncodingFlag;
  // RapidJSON's memory stream reads a NUL byte as the end of the text; JSON has none anyway
  // (not even inside a string, where control characters must be escaped).
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat("malformed JSON at byte ", nul, ": a NUL byte"));
  }
  rapidjson::MemoryStream stream(text.data(), text.size());
  rapidjson::Reader reader;
  TreeBuilder builder(limits);
  const rapidjson::ParseResult result = reader.Parse<kFlags>(stream, builder);
  if (!result) {
    const std::string why = result.Code() == rapidjson::kParseErrorTermination
                                ? builder.why()
                                : rapidjson::GetParseError_En(result.Code());
    return absl::InvalidArgumentError(
        absl::StrCat("malformed JSON at byte ", result.Offset(), ": ", why));
  }
  return std::move(builder.root());
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
  // Rounding past the largest double saturates rather than failing: it is a number, just a
  // large one.
  if (ec == std::errc::result_out_of_range) return t[0] == '-' ? -HUGE_VAL : HUGE_VAL;
  if (ec != std::errc() || ptr != t.data() + t.size()) return NotA(v, what, "a number");
  return out;
}

// RapidJSON's output stream concept over the writer's std::string.
struct StringOutput {
  using Ch = char;
  std::string* out;
  void Put(char c) { out->push_back(c); }
  void Flush() {}
};

class Writer::Impl {
 public:
  explicit Impl(std::string* out) : stream{out}, writer(stream) {}
  StringOutput stream;
  rapidjson::Writer<StringOutput, rapidjson::UTF8<>, rapidjson::UTF8<>, rapidjson::CrtAllocator,
                    rapidjson::kWriteNanAndInfFlag>
      writer;
};

Writer::Writer(NonFinite non_finite)
    : non_finite_(non_finite), impl_(std::make_unique<Impl>(&out_)) {}
Writer::~Writer() = default;

std::string Writer::Take() {
  std::string text = std::move(out_);
  out_.clear();
  impl_->writer.Reset(impl_->stream);  // a new document may follow
  return text;
}

Writer& Writer::BeginObject() {
  impl_->writer.StartObject();
  return *this;
}
Writer& Writer::EndObject() {
  impl_->writer.EndObject();
  return *this;
}
Writer& Writer::BeginArray() {
  impl_->writer.StartArray();
  return *this;
}
Writer& Writer::EndArray() {
  impl_->writer.EndArray();
  return *this;
}
Writer& Writer::Key(std::string_view key) {
  impl_->writer.Key(key.data(), static_cast<rapidjson::SizeType>(key.size()));
  return *this;
}
Writer& Writer::String(std::string_view s) {
  impl_->writer.String(s.data(), static_cast<rapidjson::SizeType>(s.size()));
  return *this;
}
Writer& Writer::Int(int64_t v) {
  impl_->writer.Int64(v);
  return *this;
}
Writer& Writer::UInt(uint64_t v) {
  impl_->writer.Uint64(v);
  return *this;
}
Writer& Writer::Bool(bool v) {
  impl_->writer.Bool(v);
  return *this;
}
Writer& Writer::Null() {
  impl_->writer.Null();
  return *this;
}

namespace {

// Shortest round-trip text of a finite value in its own type (0.1f is "0.1", not the
// double 0.10000000149011612 that RapidJSON would write for it).
template <class F>
std::string Shortest(F v) {
  char buf[64];
  const auto [ptr, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, ec == std::errc() ? ptr : buf);
}

}  // namespace

Writer& Writer::Double(double v) {
  if (!std::isfinite(v)) {
    if (non_finite_ == NonFinite::kNull) return Null();
    impl_->writer.Double(v);  // NaN, Infinity, -Infinity
    return *this;
  }
  const std::string text = Shortest(v);
  impl_->writer.RawValue(text.data(), text.size(), rapidjson::kNumberType);
  return *this;
}

Writer& Writer::Float(float v) {
  if (!std::isfinite(v)) return Double(v);
  const std::string text = Shortest(v);
  impl_->writer.RawValue(text.data(), text.size(), rapidjson::kNumberType);
  return *this;
}

std::string Quote(std::string_view s) {
  std::string out;
  StringOutput stream{&out};
  rapidjson::Writer<StringOutput> writer(stream);
  writer.String(s.data(), static_cast<rapidjson::SizeType>(s.size()));
  return out;
}

}  // namespace kiln::json
