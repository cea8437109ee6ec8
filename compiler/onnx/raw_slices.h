// Large initializers' bytes left where they are in a serialized model, so an import copies
// them once (model bytes -> tensor) instead of twice (model bytes -> protobuf's string ->
// tensor).
//
// Why: parsing ResNet-50's 100 MB with protobuf copies every raw_data into a fresh string,
// and on this project's VMs the first touch of fresh memory costs ~14 us per 4 KB page: about
// 0.4 s of a warm load went to that copy alone.
//
// How: the model's wire format is walked (ModelProto.graph -> GraphProto.initializer ->
// TensorProto.raw_data) and copied without each raw_data of `min_bytes` or more, which
// becomes external data at "kiln-raw:<offset>:<length>", its place in the original bytes.
// Everything else is copied as written, so the parsed result is the same model. The importer
// then reads those locations straight from the original bytes (ImportModelBytes).
#pragma once

#include <cstddef>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>

namespace kiln::onnx_io {

inline constexpr char kRawSliceScheme[] = "kiln-raw:";

struct SplitModel {
  std::string bytes;  // the model without the large raw_data
  std::set<std::pair<size_t, size_t>> slices;  // (offset, length) of each, in the original
};

// nullopt when there is nothing to gain (no raw_data that large) or the bytes are not a
// ModelProto this walk understands (wire groups, raw_data twice in one tensor, anything
// malformed): the caller then parses them whole, as before, and gets protobuf's verdict.
// An initializer that already has external data is copied as written.
std::optional<SplitModel> SplitRawData(std::string_view bytes, size_t min_bytes);

// The node with the most attributes, found by the same walk of the wire format (the model's
// graph and the bodies in its nodes' attributes): a node of a million attributes is refused
// before protobuf builds a million messages for it (seconds and hundreds of MB). Malformed
// bytes end the walk where they start; the parse reports them.
struct WidestNode {
  size_t attributes = 0;
  std::string op_type, name;
};
WidestNode FindWidestNode(std::string_view model);

// "kiln-raw:<offset>:<length>" -> (offset, length); nullopt for anything else.
std::optional<std::pair<size_t, size_t>> ParseRawSlice(const std::string& location);

}  // namespace kiln::onnx_io
