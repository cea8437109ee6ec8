// A decoder's dims when its config leaves them open, so a decoder with past (the export every
// common tool writes: past_key_values.* -> present.*, server/generate/decoder_contract.h)
// loads with no config and generates, served by shape classes with no build after READY.
//
// Nothing in a decoder's shapes bounds its two symbols: its position table is indexed by
// values (position_ids), not by a dim, so the profile search (dim_profiles.h) would give both
// the default [1, 4096], which shape classes do not serve (padding.h: at most 1024 positions)
// and whose per-shape engines build at every new length, once per token. What bounds them is
// the context: the rows of the table position_ids index (input_hints.h), at most
// kMaxClassSize. The cache's length takes [0, context - 1] (0: a first step, which a model
// served by shape classes pads to its first class); the new positions of one step take
// [1, generation.prefill_chunk] in the classes 1 (a decode step) and the chunk (a prompt's
// chunk), which is every step the loop runs. A Predict of more new positions than a chunk is
// outside that range (INVALID_ARGUMENT naming it); dynamic_dims in the config sets any other.
#pragma once

#include <string>

#include "base/status.h"
#include "ir/graph.h"
#include "server/common/model_signature.h"
#include "server/model/model_config.h"

namespace kiln::server {

// The graph's declared inputs and outputs as a signature (symbolic dims -1, their names in
// dim_symbols, each symbol in default_dims at 1): what the decoder contract is found from
// before anything is built.
ModelSignature DeclaredSignature(const Graph& model);

// Fills the profiles above into `config` when generation.mode is not off, the model fits the
// decoder contract, and the config gives neither of its two symbols a size, range or classes.
// Returns what it chose for the load log ("" when it left the config alone).
std::string ApplyDecoderDims(const Graph& model, ModelConfig& config);

// Sets config.cpu_wide_runs for a decoder the generation loop serves with several instances
// on the CPU, each engine's team left to kilnd (cpu_threads 0): its engines are built on every
// core, run on their share, and a step the loop runs alone takes every core. Returns what it
// chose for the load log ("" when it left the config alone).
std::string ApplyWideRuns(const Graph& model, ModelConfig& config);

}  // namespace kiln::server
