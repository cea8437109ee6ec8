// Batch edits of a Graph's node list, for passes that change many nodes at once.
//
// Graph::RemoveNode, InsertNode and ReplaceAllUses each walk the whole node list, so a pass
// that calls them once per match is quadratic in the graph: a chain of 20k Adds took 20 s to
// compile, 200k did not finish. These do the same edits for any number of nodes in one walk.
#pragma once

#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ir/graph.h"

namespace kiln {

// Graph::RemoveNode for each node (their outputs lose them as producer).
void RemoveNodes(Graph& graph, const std::vector<Node*>& nodes);

// Graph::InsertNode(before, node) for each pair, in order. Each `before` is null (append) or
// a node already in the graph, not one of `inserts`.
void InsertNodes(Graph& graph, std::vector<std::pair<Node*, std::unique_ptr<Node>>> inserts);

// Graph::ReplaceAllUses(from, to) for every pair of `map` (node inputs and graph outputs); a
// `to` that is itself replaced follows the map to its end, as the calls made in order would.
// The map has no cycle.
void ReplaceAllUses(Graph& graph, const std::unordered_map<const Value*, Value*>& map);

}  // namespace kiln
