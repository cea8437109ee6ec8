#include "server/model/engine_factory.h"

#include "runtime/backend.h"

namespace kiln::server {

std::set<std::string> PassesOffOn(const std::string& device) {
  absl::StatusOr<const runtime::Backend*> b = runtime::FindBackend(device);
  return b.ok() ? (*b)->PassesOff() : std::set<std::string>{};
}

std::string LowerPrecisionOn(const std::string& device) {
  absl::StatusOr<const runtime::Backend*> b = runtime::FindBackend(device);
  return b.ok() ? (*b)->LowerPrecision() : "";
}

std::string DeviceFingerprint(const std::string& device) {
  absl::StatusOr<const runtime::Backend*> b = runtime::FindBackend(device);
  return b.ok() ? (*b)->Fingerprint(device) : device;
}

absl::StatusOr<std::unique_ptr<runtime::Engine>> BuildEngine(
    const std::string& device, const std::string& cpu_layout, int cpu_threads, bool tune_threads,
    const CompiledGraph& compiled, bool warm_up, bool winograd, int cpu_run_threads) {
  ASSIGN_OR_RETURN(const runtime::Backend* backend, runtime::FindBackend(device));
  runtime::BuildOptions options;
  options.layout = cpu_layout;
  options.threads = cpu_threads;
  options.run_threads = cpu_run_threads;
  options.tune_threads = tune_threads;
  options.warm_up = warm_up;
  options.winograd = winograd;
  // Graphs with data-dependent output sizes get a dynamic region (model_builder.cc refuses
  // them where a batch would have to be split into rows).
  options.dynamic_shapes = true;
  return backend->Build(device, compiled, options);
}

}  // namespace kiln::server
