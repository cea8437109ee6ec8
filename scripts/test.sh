#!/usr/bin/env bash
# The test command of the README and of CI: dependencies -> build -> every ctest suite.
#   scripts/test.sh                 everything (unit, conformance, real models, robustness)
#   scripts/test.sh -L unit         only the unit tests (any ctest arguments pass through)
# BUILD_DIR (default build) and KILN_WERROR (default ON) may be set in the environment.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
# ccache keys on paths relative to the checkout, so clones in other folders share the cache.
export CCACHE_BASEDIR="$root"
"$root/scripts/install-deps.sh"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DKILN_WERROR="${KILN_WERROR:-ON}" >/dev/null
cmake --build "$build"
ctest --test-dir "$build" --output-on-failure -j2 "$@"
