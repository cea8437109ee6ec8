#!/usr/bin/env bash
# Installs everything Kiln needs to build and test, from Debian 12 packages and the npm
# registry. Idempotent: safe to run again; used by .ci/run, the README and the Dockerfile.
#   scripts/install-deps.sh                     build + test dependencies (the default)
#   KILN_DEPS=build scripts/install-deps.sh     only what building kilnd/kiln needs (no test
#                                               tools, no npm): the Dockerfile's build stage
#   KILN_DEPS=runtime scripts/install-deps.sh   only the shared libraries the built kilnd loads:
#                                               the runtime image
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
sudo_cmd=""
if [ "$(id -u)" -ne 0 ]; then sudo_cmd="sudo"; fi

build_pkgs=(
  build-essential cmake ninja-build ccache pkg-config git
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libonnx-dev libdnnl-dev ocl-icd-opencl-dev opencl-headers libspdlog-dev libfmt-dev libyaml-cpp-dev
  libcpp-httplib-dev prometheus-cpp-dev rapidjson-dev libxxhash-dev libsentencepiece-dev
  libgtest-dev libgmock-dev libbenchmark-dev libabsl-dev
  clang libclang-rt-14-dev clang-format
)
test_pkgs=(
  python3 python3-numpy python3-onnx python3-protobuf python3-grpcio python3-grpc-tools
  python3-torch python3-torchvision
  prometheus python3-yaml openssl grpc-proto sentencepiece
  docker.io docker-compose debootstrap
)
# The shared libraries of `ldd build/server/kilnd`, by package (dpkg -S), and libsentencepiece0
# for the tokenizer shim kilnd loads; nothing else (the container health check is a bash
# script). Keep in sync with the Dockerfile's runtime stage (tests/deploy/check_deploy_files.py
# compares them).
runtime_pkgs=(
  libabsl20220623 libbrotli1 libc-ares2 libcpp-httplib0.11 libdnnl2 libfmt9 libgomp1
  libgrpc++1.51 libgrpc29 libonnx1 libprometheus-cpp-core1.0 libprotobuf32 libre2-9
  libspdlog1.10 libssl3 libstdc++6 libyaml-cpp0.7 ocl-icd-libopencl1 zlib1g libsentencepiece0
)
# Node.js may come from elsewhere (a newer build that conflicts with Debian's npm): take
# Debian's only where none is on the PATH.
if [ "${KILN_DEPS:-all}" = all ]; then
  command -v npm >/dev/null 2>&1 || test_pkgs+=(nodejs npm)
fi
mode="${KILN_DEPS:-all}"
case "$mode" in
  all) wanted=("${build_pkgs[@]}" "${test_pkgs[@]}") ;;
  build) wanted=("${build_pkgs[@]}") ;;
  runtime) wanted=("${runtime_pkgs[@]}") ;;
  *) echo "install-deps: KILN_DEPS must be all, build or runtime (got '$mode')" >&2; exit 2 ;;
esac

missing=()
for p in "${wanted[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# ONNX Runtime for Node: the external reference and CPU performance peer. The CPU build ships
# inside the npm package, so --ignore-scripts (no download step) is enough.
ort_dir="$here/tools/ort"
if [ "$mode" = all ] && [ ! -d "$ort_dir/node_modules/onnxruntime-node" ]; then
  echo "install-deps: installing onnxruntime-node@1.30.0"
  (cd "$ort_dir" && npm install --no-audit --no-fund --ignore-scripts onnxruntime-node@1.30.0 >/dev/null)
fi
echo "install-deps: done"
