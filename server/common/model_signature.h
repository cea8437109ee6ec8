// What a client must send and gets back: the model's inputs and outputs. For batchable
// models dim 0 of every input and output is the batch dim, shown as -1.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "runtime/engine.h"

namespace kiln::server {

struct ModelSignature {
  std::vector<runtime::TensorSpec> inputs, outputs;
  bool batchable = true;       // every input has a symbolic (or unknown) dim 0
  int64_t max_batch_size = 1;  // rows a request may carry (batchable) ; 1 otherwise
  // Dynamic models (model config dynamic_dims) only, else empty. Per input and dim: the
  // symbol served at any size there ("" for the batch and fixed dims); those dims show as -1
  // in `inputs`, and inputs sharing a symbol must agree on its size.
  std::vector<std::vector<std::string>> dim_symbols;
  // The sizes the model's own engines were built at: requests with other sizes run on
  // engines specialised for them (server/serving/shape_engines.h).
  std::map<std::string, int64_t> default_dims;
  // The sizes served per symbol, [min, max] inclusive (server/model/dim_profiles.h): a request
  // outside is INVALID_ARGUMENT.
  std::map<std::string, std::pair<int64_t, int64_t>> dim_ranges;
  // Inputs a request may leave out, filled with ones of the size the other inputs give them:
  // an attention mask the server added to a decoder exported without one
  // (server/model/cache_mask.h), which a request written for the export does not send.
  std::set<std::string> ones_when_absent;
  bool dynamic() const { return !default_dims.empty(); }
};

}  // namespace kiln::server
