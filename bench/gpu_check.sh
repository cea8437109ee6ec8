#!/usr/bin/env bash
# The CUDA backend's check on a real GPU (docs/cuda-engine.md), prepared here and run there.
#
#   bench/gpu_check.sh bundle [BUILD_DIR]
#       Here (Debian 12, no GPU needed). Builds `kiln` with the CUDA backend in BUILD_DIR
#       (default build-cuda) and packs BUILD_DIR/gpu-bundle.tar.xz, at most 64 MiB:
#         bin/kiln     stripped
#         lib/         every shared library kiln loads (found with ldd; the CUDA libraries are
#                      opened at run time and are not among them), glibc and its loader
#                      included: the GPU machine is not Debian, so kiln runs there through
#                      lib/ld-linux-x86-64.so.2 on these libraries
#         models/      ONNX skeletons of resnet50, mobilenet_v2 and a BERT-base-sized encoder
#                      (bench/gpu_models.py: weights are filled there from a fixed seed)
#         node/        the ONNX node conformance tests ($KILN_ONNX_TESTS_DIR/node)
#   bench/gpu_check.sh run [OUT_DIR]
#       On the GPU machine, from the repository root with the bundle at
#       build-cuda/gpu-bundle.tar.xz (or $KILN_GPU_BUNDLE). Needs the CUDA driver, PyTorch with
#       its CUDA libraries, onnx, numpy and onnxruntime in python3; no apt, nothing built.
#       The CUDA libraries kiln opens (libcublasLt.so.13, libnvrtc.so.13, libcudnn.so.9)
#       come from that machine: PyTorch's wheels (site-packages/nvidia/*/lib, torch/lib),
#       then the toolkit beside nvcc, then the driver's directory (libcuda.so.1) -- that list
#       is kiln's library path (--library-path of the bundled loader, which is what
#       LD_LIBRARY_PATH would be). Phases, each under its own time limit, each rewriting
#       OUT_DIR/gpu_check.json (default $OUT, else ./gpu-check-out) so a cut-short run still
#       reports what it measured:
#         1. environment: `kiln devices --json` (the CUDA libraries' versions, or which are
#            missing and why), nvidia-smi, torch, the bundle's libraries as the loader resolved them
#         2. conformance: `kiln check --backend cuda` over node/ in parallel shards, and the
#            reference backend over the same tests (a test failing on both is not CUDA's)
#         3. models: materialized (expected outputs from ONNX Runtime) and `kiln check --backend cuda`,
#            also with --nonfinite (NaN/inf/-0/denormal inputs against the reference)
#         4. latency at batch 1 and 8: `kiln bench --backend cuda` (fp32; resnet50 also --tf32)
#            against PyTorch eager and torch.compile on the same architectures, fp32, TF32 off
#       Knobs: GPU_CHECK_SHARDS (8), GPU_CHECK_NO_COMPILE=1 (skip torch.compile),
#       GPU_CHECK_MODELS ("resnet50 mobilenet_v2 bert_base"), GPU_CHECK_RUNS (200).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
limit_mib=64

die() { echo "gpu_check: $*" >&2; exit 1; }

# ----------------------------------------------------------------------------- bundle (here)
is_cuda_lib() { [[ "$1" =~ ^lib(cublas|cublasLt|nvrtc|nvrtc-builtins|cudnn.*|cudart|cuda)\.so ]]; }

bundle() {
  local build="${1:-$root/build-cuda}" stage
  export CCACHE_BASEDIR="$root"
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_WERROR=ON >/dev/null || die "configure failed"
  cmake --build "$build" --target kiln || die "build failed"
  local kiln="$build/tools/kiln"
  "$kiln" devices --json | grep -q '"compiled":true' || die "$kiln has no CUDA backend (no CUDA toolkit at configure time?)"
  stage="$build/gpu-bundle"
  rm -rf "$stage" && mkdir -p "$stage/bin" "$stage/lib" "$stage/models"
  cp "$kiln" "$stage/bin/kiln" && strip --strip-unneeded "$stage/bin/kiln"
  local lib name
  while read -r lib; do
    name="$(basename "$lib")"
    is_cuda_lib "$name" && continue
    cp -L "$lib" "$stage/lib/$name"
  done < <(ldd "$kiln" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\/.*ld-linux/ {print $1}')
  chmod +x "$stage/lib/"ld-linux*.so* || die "no dynamic loader found by ldd"
  /usr/bin/python3 "$root/bench/gpu_models.py" skeleton --out "$stage/models" || die "model skeletons failed"
  local node="${KILN_ONNX_TESTS_DIR:-$root/../shared/onnx-tests}/node"
  if [ -d "$node" ]; then cp -r "$node" "$stage/node"; else echo "gpu_check: no $node: bundle without conformance tests" >&2; fi
  tar -C "$stage" -cJf "$build/gpu-bundle.tar.xz" . || die "tar failed"
  local bytes; bytes=$(stat -c %s "$build/gpu-bundle.tar.xz")
  echo "bundle: $build/gpu-bundle.tar.xz, $((bytes / 1024)) KiB ($(du -sh "$stage" | cut -f1) unpacked; $(ls "$stage/lib" | wc -l) libraries)"
  [ "$bytes" -le $((limit_mib * 1024 * 1024)) ] || die "bundle over ${limit_mib} MiB"
}

# ----------------------------------------------------------------------------- run (GPU machine)
# Directories holding the CUDA libraries, best first (see the header).
cuda_lib_path() {
  python3 - <<'PY'
import glob, os, site
dirs = []
roots = site.getsitepackages() + [site.getusersitepackages()]
for sp in roots:
    dirs += sorted(glob.glob(os.path.join(sp, "nvidia", "*", "lib")))
    dirs += sorted(glob.glob(os.path.join(sp, "nvidia", "*", "*", "lib")))
try:
    import torch
    dirs.append(os.path.join(os.path.dirname(torch.__file__), "lib"))
except Exception:
    pass
print(":".join(d for d in dict.fromkeys(dirs) if os.path.isdir(d)))
PY
  local nvcc; nvcc="$(command -v nvcc || true)"
  [ -n "$nvcc" ] && echo "$(dirname "$(dirname "$nvcc")")/lib64"
  ldconfig -p 2>/dev/null | awk '/libcuda\.so\.1 / {print $NF; exit}' | xargs -r dirname
}

phase() {  # phase NAME SECONDS CMD...: runs CMD with a time limit, records its duration
  local name="$1" secs="$2"; shift 2
  local t0=$SECONDS
  echo "== $name (limit ${secs}s)"
  timeout "$secs" "$@"; local rc=$?
  echo "{\"phase\": \"$name\", \"rc\": $rc, \"seconds\": $((SECONDS - t0))}" >> "$work/phases.jsonl"
  python3 "$root/bench/gpu_report.py" "$work" "$out/gpu_check.json" || true
}

conformance() {
  local shards="${GPU_CHECK_SHARDS:-8}" i
  [ -d "$B/node" ] || { echo "no conformance tests in the bundle"; return 0; }
  mapfile -t tests < <(find "$B/node" -mindepth 1 -maxdepth 1 -type d | sort)
  for ((i = 0; i < shards; i++)); do
    local part=() j
    for ((j = i; j < ${#tests[@]}; j += shards)); do part+=("${tests[j]}"); done
    # Each shard has its own limit: the phase's timeout would not reach background jobs.
    timeout 140 "$KILN" check --backend cuda -q --json "$work/conf_cuda_$i.json" "${part[@]}" \
      > "$work/conf_cuda_$i.log" 2>&1 &
    timeout 140 "$KILN" check --backend reference -q --json "$work/conf_ref_$i.json" "${part[@]}" \
      > "$work/conf_ref_$i.log" 2>&1 &
  done
  wait
}

models() {
  python3 "$root/bench/gpu_models.py" materialize --skeletons "$B/models" --out "$work/models" --kiln "$KILN" \
    > "$work/materialize.log" 2>&1 || return 1
  local m
  for m in ${GPU_CHECK_MODELS:-resnet50 mobilenet_v2 bert_base}; do
    "$KILN" check --backend cuda --rtol 1e-3 --atol 1e-4 --json "$work/model_$m.json" "$work/models/$m" \
      > "$work/model_$m.log" 2>&1
  done
  # NaN, +-inf, -0 and denormals planted in the inputs, against the reference on the raw
  # graph: whether cuDNN's fused ReLU and cuBLASLt's epilogues keep NaN as ONNX does.
  for m in ${GPU_CHECK_MODELS:-resnet50 mobilenet_v2 bert_base}; do
    "$KILN" check --backend cuda --nonfinite --rtol 1e-3 --atol 1e-4 --json "$work/model_nonfinite_$m.json" \
      "$work/models/$m" > "$work/model_nonfinite_$m.log" 2>&1
  done
}

latency() {
  local m b runs="${GPU_CHECK_RUNS:-200}" models="${GPU_CHECK_MODELS:-resnet50 mobilenet_v2 bert_base}"
  # Kiln and PyTorch eager first (seconds each), then torch.compile (tens of seconds each,
  # resnet50 first): what the phase's limit cuts is the least needed.
  for m in $models; do
    for b in 1 8; do
      "$KILN" bench "$work/models/$m/model.onnx" --backend cuda --batch "$b" --runs "$runs" --warmup 20 \
        --json "$work/bench_kiln_${m}_$b.json" > /dev/null 2> "$work/bench_kiln_${m}_$b.log"
      if [ "$m" = resnet50 ]; then
        "$KILN" bench "$work/models/$m/model.onnx" --backend cuda --tf32 --batch "$b" --runs "$runs" --warmup 20 \
          --json "$work/bench_kilntf32_${m}_$b.json" > /dev/null 2> "$work/bench_kilntf32_${m}_$b.log"
      fi
      python3 "$root/bench/gpu_models.py" torch-latency --model "$m" --batch "$b" --mode eager --runs "$runs" \
        > "$work/bench_eager_${m}_$b.json" 2> "$work/bench_eager_${m}_$b.log"
    done
  done
  [ -n "${GPU_CHECK_NO_COMPILE:-}" ] && return 0
  for m in $models; do
    for b in 1 8; do
      python3 "$root/bench/gpu_models.py" torch-latency --model "$m" --batch "$b" --mode compile --runs "$runs" \
        > "$work/bench_compile_${m}_$b.json" 2> "$work/bench_compile_${m}_$b.log"
    done
  done
}

environment() {
  "$KILN" devices --json > "$work/devices.json" 2> "$work/devices.log"
  "$B/lib/"ld-linux*.so* --list --library-path "$libpath" "$B/bin/kiln" > "$work/ldd.txt" 2>&1
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$work/nvidia_smi.txt" 2>&1
  python3 -c 'import torch; print(torch.__version__, torch.version.cuda, torch.backends.cudnn.version())' \
    > "$work/torch.txt" 2>&1
  ! grep -q "not found" "$work/ldd.txt"
}

run() {
  out="${1:-${OUT:-$PWD/gpu-check-out}}"
  local tarball="${KILN_GPU_BUNDLE:-$root/build-cuda/gpu-bundle.tar.xz}"
  [ -f "$tarball" ] || die "no bundle at $tarball (make it with: bench/gpu_check.sh bundle)"
  mkdir -p "$out"
  # Unpacked beside the tarball, not in /tmp (which may be mounted noexec).
  B="$(mktemp -d "$(dirname "$tarball")/gpu-run.XXXX")"
  work="$B/work"
  mkdir -p "$work"
  tar -C "$B" -xJf "$tarball" || die "cannot unpack $tarball"
  libpath="$B/lib:$(cuda_lib_path | paste -sd: -)"
  echo "kiln library path: $libpath"
  # kiln through the bundled loader on the bundled libraries and the machine's CUDA ones.
  # kiln re-executes itself to set the OpenMP wait policy unless it is set; through the
  # loader it could not, so it is set here.
  KILN="$B/kiln"
  printf '#!/bin/sh\nexport OMP_WAIT_POLICY=PASSIVE GOMP_SPINCOUNT=1000\nexec %s --library-path "%s" "%s" "$@"\n' \
    "$(ls "$B/lib/"ld-linux*.so*)" "$libpath" "$B/bin/kiln" > "$KILN"
  chmod +x "$KILN"
  export B libpath work root KILN
  # At most ~8.5 minutes in all, so one call of the device tool (10 minutes) holds it.
  phase environment 30 bash -c "$(declare -f environment); environment"
  phase conformance 150 bash -c "$(declare -f conformance); conformance"
  phase models 120 bash -c "$(declare -f models); models"
  phase latency 210 bash -c "$(declare -f latency); latency"
  echo "report: $out/gpu_check.json"
}

case "${1:-}" in
  bundle) shift; bundle "$@" ;;
  run) shift; run "$@" ;;
  *) sed -n '2,40p' "$0"; exit 2 ;;
esac
