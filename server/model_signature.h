// What a client must send and gets back: the model's inputs and outputs. For batchable
// models dim 0 of every input and output is the batch dim, shown as -1.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/engine.h"

namespace kiln::server {

struct ModelSignature {
  std::vector<runtime::TensorSpec> inputs, outputs;
  bool batchable = true;       // every input has a symbolic (or unknown) dim 0
  int64_t max_batch_size = 1;  // rows a request may carry (batchable) ; 1 otherwise
};

}  // namespace kiln::server
