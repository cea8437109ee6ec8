// The activation list of an RNN, GRU or LSTM node as ONNX defines it, shared by the
// reference kernel (ops_rnn.cc) and the CPU engine's recurrent kernel, so both read the
// attribute the same way.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace kiln::ref {

// One name per function of every direction: `per_dir` is 1 (RNN), 2 (GRU) or 3 (LSTM).
// Without the attribute, ONNX's defaults (Tanh; Sigmoid, Tanh; Sigmoid, Tanh, Tanh); a
// bidirectional node given one direction's list uses it for both. nullopt when the count is
// neither per_dir nor per_dir * dirs.
inline std::optional<std::vector<std::string>> RnnActivationNames(const Node& node, size_t per_dir,
                                                                  int64_t dirs) {
  std::vector<std::string> names;
  if (const Attribute* a = node.FindAttr("activations")) names = a->strings;
  if (names.empty()) {
    names = per_dir == 1   ? std::vector<std::string>{"Tanh"}
            : per_dir == 2 ? std::vector<std::string>{"Sigmoid", "Tanh"}
                           : std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"};
  }
  if (names.size() == per_dir && dirs == 2) {
    const std::vector<std::string> forward = names;  // inserting a vector into itself is UB
    names.insert(names.end(), forward.begin(), forward.end());
  }
  if (names.size() != per_dir * static_cast<size_t>(dirs)) return std::nullopt;
  return names;
}

}  // namespace kiln::ref
