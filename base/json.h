// JSON for every reader and writer in Kiln (the KServe v2 REST API, the compile report, the
// tools' and the load generator's reports), on RapidJSON (Debian's rapidjson-dev, header
// only). What Kiln adds is policy:
//
// - A request body is client input: nesting depth is bounded (RapidJSON's iterative parser
//   keeps the stack off the call stack; the bound keeps the tree small), a member name given
//   twice is refused (readers differ on which one wins, so a proxy and kilnd could act on
//   different requests), and every failure is INVALID_ARGUMENT saying at which byte.
// - Numbers keep their text: the v2 protocol carries INT64/UINT64 tensor elements that a
//   double cannot hold exactly, so each is converted once its target type is known
//   (AsInt64, ...). NaN, Infinity and -Infinity are read and, by default, written as Python's
//   json module does, since float tensors hold them; reports read by strict parsers (a
//   browser's JSON.parse) write null instead. A number past double's exponent range (1e999)
//   is refused by the parser; one that rounds past it (2e308) reads as infinity.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace kiln::json {

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
  friend class TreeBuilder;
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

// How a writer spells a non-finite double or float.
enum class NonFinite {
  kNames,  // NaN, Infinity, -Infinity (Python's json module; the v2 REST API)
  kNull,   // null: the reader is a strict JSON parser
};

// Appends JSON text. Commas are placed by the writer; keys only inside objects. Doubles and
// floats are written in their shortest round-trip form (a float as a float: 0.1f is "0.1").
class Writer {
 public:
  explicit Writer(NonFinite non_finite = NonFinite::kNames);
  ~Writer();
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  Writer& BeginObject();
  Writer& EndObject();
  Writer& BeginArray();
  Writer& EndArray();
  Writer& Key(std::string_view key);
  Writer& String(std::string_view s);
  Writer& Int(int64_t v);
  Writer& UInt(uint64_t v);
  Writer& Double(double v);
  Writer& Float(float v);
  Writer& Bool(bool v);
  Writer& Null();

  // A member of the object being written: Key(key) then the value.
  Writer& Field(std::string_view key, std::string_view v) { return Key(key).String(v); }
  Writer& Field(std::string_view key, const char* v) { return Key(key).String(v); }
  Writer& Field(std::string_view key, double v) { return Key(key).Double(v); }
  Writer& Field(std::string_view key, int64_t v) { return Key(key).Int(v); }
  Writer& Field(std::string_view key, bool v) { return Key(key).Bool(v); }

  const std::string& text() const { return out_; }
  std::string Take();  // the text so far; the writer starts a new document

 private:
  class Impl;
  std::string out_;
  NonFinite non_finite_;
  std::unique_ptr<Impl> impl_;
};

// `s` as a JSON string literal, quotes included.
std::string Quote(std::string_view s);

}  // namespace kiln::json
