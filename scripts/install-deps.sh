#!/usr/bin/env bash
# Installs everything Kiln needs to build and test, from Debian 12 packages and the npm
# registry. Idempotent: safe to run again; used by .ci/run, the README and the Dockerfile.
#   scripts/install-deps.sh            build + test dependencies
#   KILN_DEPS=runtime scripts/install-deps.sh   only what the built server needs at run time
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
sudo_cmd=""
if [ "$(id -u)" -ne 0 ]; then sudo_cmd="sudo"; fi

build_pkgs=(
  build-essential cmake ninja-build ccache pkg-config git
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libonnx-dev libdnnl-dev ocl-icd-opencl-dev opencl-headers libspdlog-dev libfmt-dev libyaml-cpp-dev
  libcpp-httplib-dev
  libgtest-dev libgmock-dev libbenchmark-dev libabsl-dev
  clang libclang-rt-14-dev
)
test_pkgs=(
  python3 python3-numpy python3-onnx python3-protobuf python3-grpcio python3-grpc-tools
  python3-torch python3-torchvision
)
# Node.js may come from elsewhere (a newer build that conflicts with Debian's npm): take
# Debian's only where none is on the PATH.
command -v npm >/dev/null 2>&1 || test_pkgs+=(nodejs npm)

missing=()
for p in "${build_pkgs[@]}" "${test_pkgs[@]}"; do
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
if [ ! -d "$ort_dir/node_modules/onnxruntime-node" ]; then
  echo "install-deps: installing onnxruntime-node@1.30.0"
  (cd "$ort_dir" && npm install --no-audit --no-fund --ignore-scripts onnxruntime-node@1.30.0 >/dev/null)
fi
echo "install-deps: done"
