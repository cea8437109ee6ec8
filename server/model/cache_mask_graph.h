// Graph building shared by the decoder rewrites made at load: the mask added to a decoder
// exported without one (cache_mask.cc) and the positions read from a decoder's own mask
// (mask_positions.cc).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "ir/graph.h"
#include "server/generate/decoder_contract.h"

namespace kiln::server::mask_graph {

// Sizes at which the keys' axis (past + sequence), the cache's length and the batch are told
// apart from every other dim: a dim or value that has them at both is theirs.
struct Probe {
  int64_t batch, past, seq;
};
inline constexpr Probe kProbes[] = {{3, 5, 2}, {2, 11, 4}};

// The graph specialized at each of kProbes, made on first use and kept, so the analyses of one
// load (the Softmaxes over the keys, the Ranges over the cache's length) share them.
class Probed {
 public:
  Probed(const Graph& g, const generate::DecoderContract& c) : graph_(g), contract_(c) {}
  // One specialized clone per probe, in kProbes' order.
  absl::StatusOr<const std::vector<std::unique_ptr<Graph>>*> Graphs();

 private:
  const Graph& graph_;
  const generate::DecoderContract& contract_;
  std::vector<std::unique_ptr<Graph>> at_;
};

// Appends `op` (in the internal opset's form) and returns its one output.
Value* Op(Graph& g, const std::string& op, std::vector<Value*> in,
          std::map<std::string, Attribute> attrs = {});

// The nodes of `op` (ai.onnx) whose first input's name is a key of `names`, in graph order.
template <class Names>
std::vector<Node*> NodesReading(const Graph& g, const std::string& op, const Names& names) {
  std::vector<Node*> found;
  for (const auto& n : g.nodes()) {
    if (n->op_type == op && n->domain.empty() && n->input(0) && names.count(n->input(0)->name)) {
      found.push_back(n.get());
    }
  }
  return found;
}

// A 1-D int64 constant.
Value* Ints(Graph& g, std::vector<int64_t> v);

// float32 1.0 where `mask` (any numeric or bool dtype) is not 0, else 0.0: a stray 2 neither
// doubles a key nor overflows what is computed from it.
Value* Real(Graph& g, Value* mask);

// Cast of `x` to `to`.
Value* CastTo(Graph& g, Value* x, DType to);

// The values (by name, which a clone keeps) that start a Range and are the cache's length at
// every probe, with their integer dtype (the imported graph's types are inferred only on its
// specialized clones): the positions an export counts from its cache's length,
// torch.arange(past, past + sequence).
// `probed`: `g` at the probes (made only when `g` has a Range whose start is not constant).
absl::StatusOr<std::map<std::string, DType>> LengthStarts(const Graph& g, Probed& probed);

// The cache's length, int64 [1], from the first cache input's shape.
Value* CacheLength(Graph& g, const generate::DecoderContract& c);

// The cache's columns of `real` ([rows, past + sequence]; `past`: CacheLength): [rows, past],
// or [1, past] for the first row alone.
Value* PastColumns(Graph& g, Value* real, Value* past, bool first_row);

// Each row's own positions: every Unsqueeze of axis 0 of a Range started at `starts`
// (positions [1, n], as torch.arange(...).unsqueeze(0) exports them) reads `row_starts` +
// Range(0, limit - start, delta) instead, [rows, n], as a position_ids input would be. The
// Range's other readers keep it: a causal mask placed by the same Range (transformers'
// cache_position) needs the padded layout's positions. `row_starts`: int64 [rows, 1]. False,
// the graph untouched, when no such Unsqueeze reads a Range.
bool PerRowPositions(Graph& g, Value* row_starts, const std::map<std::string, DType>& starts);

}  // namespace kiln::server::mask_graph
