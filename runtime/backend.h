// The backends an engine can be built on (reference, cpu, cuda) behind one interface: the
// device strings each serves, what the engine cache keys its engines by, the passes that stay
// off for it, the lower precision it multiplies natively, and building an engine. The server
// and the tools find a backend by device string here (FindBackend); device names are parsed
// nowhere else.
#pragma once

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "base/status.h"
#include "compiler/compile.h"
#include "runtime/engine.h"

namespace kiln::runtime {

struct BuildOptions {
  // cpu: "tune", "primitive" or "blocked". cuda: an earlier build's EngineInfo::layout (its
  // measured convolution algorithms); anything else measures them.
  std::string layout = "tune";
  int threads = 0;            // cpu: OpenMP threads of the engine (0: all cores)
  // cpu: the team a run uses unless the calling thread widens it (runtime/run_width.h), when
  // fewer than `threads` (0: `threads`). An engine that cannot change its team per run is
  // built at this many threads instead (EngineInfo::max_threads says which came back).
  int run_threads = 0;
  bool tune_threads = false;  // cpu: a small engine may settle on one thread (cpu/tune.h)
  // Run once on zeros at build, so the first request does not pay for first-touch page
  // faults and JIT; a caller that runs the engine at once (the warm-up check) may skip it.
  bool warm_up = true;
  bool dynamic_shapes = true;  // cpu: data-dependent output sizes run per call
  bool tf32 = false;           // cuda: TF32 tensor cores for float32 (~1e-3 relative)
  bool winograd = true;        // cpu: 3x3 convolutions may run Winograd's algorithm (cpu_engine.h)
};

class Backend {
 public:
  virtual ~Backend() = default;
  // "reference", "cpu" or "cuda": the family of the device strings it serves.
  virtual const char* name() const = 0;
  // Whether `device` is one of its devices ("reference"; "cpu"; "cuda" and "cuda:N").
  virtual bool Serves(const std::string& device) const = 0;
  // What an engine built for `device` depends on besides its graph (the CPU's ISA flags and
  // the ISA level in force; the GPU and its driver and library versions), for cache keys.
  virtual std::string Fingerprint(const std::string& device) const = 0;
  // The passes that stay off for its engines (compiler/pipeline.h PassesOffFor, with this
  // machine's capabilities).
  virtual std::set<std::string> PassesOff() const = 0;
  // The lower precision its engines multiply natively here (PipelineOptions::precision):
  // "bf16", or "" for none.
  virtual std::string LowerPrecision() const { return ""; }
  // A device this backend serves but this build or machine cannot run answers
  // UNIMPLEMENTED or FAILED_PRECONDITION with the reason.
  virtual absl::StatusOr<std::unique_ptr<Engine>> Build(const std::string& device,
                                                        const CompiledGraph& compiled,
                                                        const BuildOptions& options) const = 0;
};

// Every backend of this build, the reference first.
const std::vector<const Backend*>& Backends();
// The backend serving `device`; INVALID_ARGUMENT naming the known devices otherwise.
absl::StatusOr<const Backend*> FindBackend(const std::string& device);

}  // namespace kiln::runtime
