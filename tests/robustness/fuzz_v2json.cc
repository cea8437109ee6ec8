// libFuzzer target: the KServe v2 REST bodies' JSON (server/json.h) and the tensors read from
// it (server/serving/kserve_tensor.h FromJsonData). Built by run_fuzz.sh (--target v2json) with
// clang++ -fsanitize=fuzzer,address,undefined.
//
// Properties: parsing never crashes and fails only with INVALID_ARGUMENT (however deep or
// malformed the text); a parsed value written back parses again and writes the same text;
// as the `data` of every datatype, an array decodes or is refused with INVALID_ARGUMENT; no
// parsed object holds a member name twice.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <string_view>

#include "base/json.h"
#include "server/serving/kserve_tensor.h"

namespace {

using kiln::json::Kind;
using kiln::json::Value;
using kiln::json::Writer;

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "fuzz_v2json: %s\n", what.c_str());
  std::abort();
}

void Write(const Value& v, Writer& w) {
  switch (v.kind()) {
    case Kind::kNull:
      w.Null();
      break;
    case Kind::kBool:
      w.Bool(v.boolean());
      break;
    case Kind::kString:
      w.String(v.text());
      break;
    case Kind::kNumber: {
      auto d = kiln::json::AsDouble(v, "number");
      if (!d.ok()) Fail("a parsed number does not convert: " + v.text());
      w.Double(*d);
      break;
    }
    case Kind::kArray:
      w.BeginArray();
      for (const Value& item : v.items()) Write(item, w);
      w.EndArray();
      break;
    case Kind::kObject: {
      w.BeginObject();
      std::set<std::string_view> names;  // a name given twice is refused by the parser
      for (const auto& [key, value] : v.members()) {
        if (!names.insert(key).second) Fail("an object kept a member name twice: " + key);
        w.Key(key);
        Write(value, w);
      }
      w.EndObject();
      break;
    }
  }
}

std::string Text(const Value& v) {
  Writer w;
  Write(v, w);
  return w.Take();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto v = kiln::json::Parse(text, {32});
  if (!v.ok()) {
    if (v.status().code() != absl::StatusCode::kInvalidArgument)
      Fail("parse: not INVALID_ARGUMENT");
    return 0;
  }
  const std::string once = Text(*v);
  auto again = kiln::json::Parse(once, {64});
  if (!again.ok()) Fail("written text does not parse: " + once);
  if (Text(*again) != once) Fail("round trip changed the text: " + once);
  if (!v->is_array()) return 0;
  const int64_t n = static_cast<int64_t>(v->items().size());
  for (const char* name :
       {"BOOL", "UINT8", "UINT64", "INT8", "INT64", "FP16", "BF16", "FP32", "FP64"}) {
    const kiln::DType dtype = *kiln::server::kserve::ParseDataType(name, "x");
    auto t = kiln::server::kserve::FromJsonData(dtype, {n}, *v, "input 'x'");
    if (!t.ok() && t.status().code() != absl::StatusCode::kInvalidArgument) {
      Fail("data: not INVALID_ARGUMENT");
    }
    if (t.ok() && t->numel() != n) Fail("data: wrong element count");
  }
  return 0;
}
