#!/usr/bin/env bash
# Installs the dependencies, builds kilnd and serves the bundled example model on the
# embedded default config (gRPC :8500, HTTP :8501). Extra arguments go to kilnd, e.g.
#   scripts/serve.sh --log-level debug
#   scripts/serve.sh --config my.yaml
# BUILD_DIR (default build) may be set in the environment. Needs no Python.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
"$root/scripts/install-deps.sh"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" --target kilnd
# Relative paths in the config (model_repository) resolve against the working directory.
cd "$root"
# kilnd picks how OpenMP threads wait (base/openmp_env.h) unless OMP_WAIT_POLICY or
# GOMP_SPINCOUNT is set here.
exec "$build/server/kilnd" "$@"
