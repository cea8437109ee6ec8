#include "compiler/onnx/raw_slices.h"

#include <charconv>
#include <cstdint>

namespace kiln::onnx_io {
namespace {

// Field numbers of onnx.proto (the ones the walk looks into or writes).
constexpr uint32_t kModelGraph = 7;
constexpr uint32_t kGraphInitializer = 5;
constexpr uint32_t kTensorRawData = 9;
constexpr uint32_t kTensorExternalData = 13;
constexpr uint32_t kTensorDataLocation = 14;
constexpr uint64_t kLocationExternal = 1;
constexpr uint32_t kEntryKey = 1, kEntryValue = 2;  // StringStringEntryProto

constexpr int kVarint = 0, kFixed64 = 1, kLen = 2, kFixed32 = 5;

bool ReadVarint(std::string_view b, size_t& pos, uint64_t& v) {
  v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (pos >= b.size()) return false;
    const auto c = static_cast<uint8_t>(b[pos++]);
    v |= static_cast<uint64_t>(c & 0x7f) << shift;
    if ((c & 0x80) == 0) return true;
  }
  return false;
}

void WriteVarint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void WriteLen(std::string& out, uint32_t number, std::string_view payload) {
  WriteVarint(out, (static_cast<uint64_t>(number) << 3) | kLen);
  WriteVarint(out, payload.size());
  out.append(payload);
}

struct Field {
  uint32_t number = 0;
  int wire_type = 0;
  uint64_t varint = 0;
  std::string_view payload;   // a LEN field's bytes
  size_t payload_offset = 0;  // ... and where they start in the whole model
  std::string_view whole;     // the field as written, tag included
};

// Reads the fields of one message; every length is checked against what is left.
class Fields {
 public:
  Fields(std::string_view bytes, size_t base) : b_(bytes), base_(base) {}
  bool done() const { return pos_ == b_.size(); }
  bool Next(Field& f) {
    const size_t start = pos_;
    uint64_t tag = 0;
    if (!ReadVarint(b_, pos_, tag) || (tag >> 3) == 0 || (tag >> 3) > UINT32_MAX) return false;
    f.number = static_cast<uint32_t>(tag >> 3);
    f.wire_type = static_cast<int>(tag & 7);
    switch (f.wire_type) {
      case kVarint:
        if (!ReadVarint(b_, pos_, f.varint)) return false;
        break;
      case kFixed64:
      case kFixed32: {
        const size_t n = f.wire_type == kFixed64 ? 8 : 4;
        if (b_.size() - pos_ < n) return false;
        pos_ += n;
        break;
      }
      case kLen: {
        uint64_t n = 0;
        if (!ReadVarint(b_, pos_, n) || n > b_.size() - pos_) return false;
        f.payload = b_.substr(pos_, n);
        f.payload_offset = base_ + pos_;
        pos_ += n;
        break;
      }
      default:
        return false;  // groups: not in onnx.proto
    }
    f.whole = b_.substr(start, pos_ - start);
    return true;
  }

 private:
  std::string_view b_;
  size_t base_;
  size_t pos_ = 0;
};

std::string Entry(std::string_view key, std::string_view value) {
  std::string e;
  WriteLen(e, kEntryKey, key);
  WriteLen(e, kEntryValue, value);
  return e;
}

// One TensorProto into `out`, without a large raw_data (recorded in `slices`).
bool SplitTensor(const Field& tensor, size_t min_bytes, std::string& out,
                 std::set<std::pair<size_t, size_t>>& slices) {
  std::string body;
  Fields fields(tensor.payload, tensor.payload_offset);
  Field f;
  int raw_fields = 0;
  bool external = false;
  std::optional<std::pair<size_t, size_t>> slice;
  while (!fields.done()) {
    if (!fields.Next(f)) return false;
    if (f.number == kTensorExternalData || f.number == kTensorDataLocation) external = true;
    if (f.number == kTensorRawData && f.wire_type == kLen) {
      if (++raw_fields > 1) return false;  // the last would win: not worth the care
      if (f.payload.size() >= min_bytes) {
        slice = std::make_pair(f.payload_offset, f.payload.size());
        continue;
      }
    }
    body.append(f.whole);
  }
  if (!slice || external) {  // nothing to take, or the importer must see it as written
    out.append(tensor.whole);
    return true;
  }
  WriteVarint(body, (static_cast<uint64_t>(kTensorDataLocation) << 3) | kVarint);
  WriteVarint(body, kLocationExternal);
  WriteLen(body, kTensorExternalData,
           Entry("location", std::string(kRawSliceScheme) + std::to_string(slice->first) + ":" +
                                 std::to_string(slice->second)));
  WriteLen(body, kTensorExternalData, Entry("length", std::to_string(slice->second)));
  WriteLen(out, tensor.number, body);
  slices.insert(*slice);
  return true;
}

bool SplitGraph(const Field& graph, size_t min_bytes, std::string& out,
                std::set<std::pair<size_t, size_t>>& slices) {
  std::string body;
  Fields fields(graph.payload, graph.payload_offset);
  Field f;
  while (!fields.done()) {
    if (!fields.Next(f)) return false;
    if (f.number == kGraphInitializer && f.wire_type == kLen) {
      if (!SplitTensor(f, min_bytes, body, slices)) return false;
    } else {
      body.append(f.whole);
    }
  }
  WriteLen(out, graph.number, body);
  return true;
}

}  // namespace

std::optional<SplitModel> SplitRawData(std::string_view bytes, size_t min_bytes) {
  SplitModel split;
  Fields fields(bytes, 0);
  Field f;
  while (!fields.done()) {
    if (!fields.Next(f)) return std::nullopt;
    if (f.number == kModelGraph && f.wire_type == kLen) {
      if (!SplitGraph(f, min_bytes, split.bytes, split.slices)) return std::nullopt;
    } else {
      split.bytes.append(f.whole);
    }
  }
  if (split.slices.empty()) return std::nullopt;
  return split;
}

namespace {

constexpr uint32_t kGraphNode = 1;
constexpr uint32_t kNodeName = 3, kNodeOpType = 4, kNodeAttribute = 5;
constexpr uint32_t kAttributeGraph = 6, kAttributeGraphs = 11;
constexpr int kMaxBodyDepth = 16;  // bodies nested deeper are left to the parse (its limit)

void ScanGraph(std::string_view graph, int depth, WidestNode& widest);

void ScanNode(std::string_view node, int depth, WidestNode& widest) {
  Fields fields(node, 0);
  Field f;
  size_t count = 0;
  std::string_view name, op_type;
  while (!fields.done() && fields.Next(f)) {
    if (f.wire_type != kLen) continue;
    if (f.number == kNodeName) name = f.payload;
    if (f.number == kNodeOpType) op_type = f.payload;
    if (f.number != kNodeAttribute) continue;
    ++count;
    if (depth >= kMaxBodyDepth) continue;
    Fields attr(f.payload, 0);
    Field a;
    while (!attr.done() && attr.Next(a)) {
      if (a.wire_type == kLen && (a.number == kAttributeGraph || a.number == kAttributeGraphs)) {
        ScanGraph(a.payload, depth + 1, widest);
      }
    }
  }
  // Cut short: these name the node in an error message, and a client wrote them.
  if (count > widest.attributes) {
    widest = {count, std::string(op_type.substr(0, 64)), std::string(name.substr(0, 64))};
  }
}

void ScanGraph(std::string_view graph, int depth, WidestNode& widest) {
  Fields fields(graph, 0);
  Field f;
  while (!fields.done() && fields.Next(f)) {
    if (f.number == kGraphNode && f.wire_type == kLen) ScanNode(f.payload, depth, widest);
  }
}

}  // namespace

WidestNode FindWidestNode(std::string_view model) {
  WidestNode widest;
  Fields fields(model, 0);
  Field f;
  while (!fields.done() && fields.Next(f)) {
    if (f.number == kModelGraph && f.wire_type == kLen) ScanGraph(f.payload, 0, widest);
  }
  return widest;
}

std::optional<std::pair<size_t, size_t>> ParseRawSlice(const std::string& location) {
  const std::string_view scheme = kRawSliceScheme;
  if (location.rfind(scheme, 0) != 0) return std::nullopt;
  const char* p = location.data() + scheme.size();
  const char* end = location.data() + location.size();
  size_t offset = 0, length = 0;
  auto [q, e1] = std::from_chars(p, end, offset);
  if (e1 != std::errc() || q == end || *q != ':') return std::nullopt;
  auto [r, e2] = std::from_chars(q + 1, end, length);
  if (e2 != std::errc() || r != end) return std::nullopt;
  return std::make_pair(offset, length);
}

}  // namespace kiln::onnx_io
