// A small JSON reader and writer for the KServe v2 REST API. Kiln's own rather than a library
// (none is among the Debian packages kilnd builds from) and deliberately strict about limits:
// a request body is client input, so nesting depth is bounded (a deep array would otherwise
// recurse the parser off the stack) and every failure says where, as INVALID_ARGUMENT.
//
// Numbers keep their text: the v2 protocol carries INT64/UINT64 tensor elements that a double
// cannot hold exactly, so each is converted once its target type is known (AsInt64, ...).
// NaN, Infinity and -Infinity are accepted and written as Python's json module does, since
// float tensors can hold them and plain JSON cannot say them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace kiln::server::json {

enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };
const char* KindName(Kind k);

class Value {
 public:
  Value() = default;
  Kind kind() const { return kind_; }
  bool is_null() const { return kind_ == Kind::kNull; }
  bool is_array() const { return kind_ == Kind::kArray; }
  bool is_object() const { return kind_ == Kind::kObject; }

  bool boolean() const { return boolean_; }                   // kBool
  const std::string& text() const { return text_; }           // kString; kNumber's text
  const std::vector<Value>& items() const { return items_; }  // kArray
  const std::vector<std::pair<std::string, Value>>& members() const { return members_; }
  // The first member named `key` of an object; null when absent (or not an object).
  const Value* Find(std::string_view key) const;

 private:
  friend class Parser;
  Kind kind_ = Kind::kNull;
  bool boolean_ = false;
  std::string text_;
  std::vector<Value> items_;
  std::vector<std::pair<std::string, Value>> members_;
};

struct Limits {
  int max_depth = 32;  // arrays and objects nested in each other
};

// The whole of `text` must be one JSON value (surrounding whitespace allowed). An object that
// names a member twice is INVALID_ARGUMENT.
absl::StatusOr<Value> Parse(std::string_view text, const Limits& limits = {});

// Exact conversions of a number; INVALID_ARGUMENT naming `what` when the value is not a
// number, not integral, or out of range. AsDouble accepts NaN and the infinities.
absl::StatusOr<int64_t> AsInt64(const Value& v, const std::string& what);
absl::StatusOr<uint64_t> AsUInt64(const Value& v, const std::string& what);
absl::StatusOr<double> AsDouble(const Value& v, const std::string& what);

// Appends JSON text. Commas are placed by the writer; keys only inside objects. Doubles and
// floats are written in their shortest round-trip form (a float as a float: 0.1f is "0.1").
class Writer {
 public:
  Writer& BeginObject() { return Open('{'); }
  Writer& EndObject() { return Close('}'); }
  Writer& BeginArray() { return Open('['); }
  Writer& EndArray() { return Close(']'); }
  Writer& Key(std::string_view key);
  Writer& String(std::string_view s);
  Writer& Int(int64_t v);
  Writer& UInt(uint64_t v);
  Writer& Double(double v);
  Writer& Float(float v);
  Writer& Bool(bool v);
  Writer& Null();

  const std::string& text() const { return out_; }
  std::string Take() { return std::move(out_); }

 private:
  Writer& Open(char c);
  Writer& Close(char c);
  void Separate();  // the comma before a value or key that is not its container's first

  std::string out_;
  std::vector<bool> first_;  // per open container: nothing written in it yet
  bool after_key_ = false;
};

// `s` as a JSON string literal, quotes included.
std::string Quote(std::string_view s);

}  // namespace kiln::server::json
