#!/usr/bin/env bash
# The CUDA backend's check on a real GPU (docs/cuda-engine.md), prepared here and run there.
#
#   bench/gpu_check.sh bundle [BUILD_DIR]
#       Here (Debian 12, no GPU needed). Builds `kiln` with the CUDA backend in BUILD_DIR
#       (default build-cuda) and packs BUILD_DIR/gpu-bundle.tar.xz, at most 64 MiB:
#         bin/kiln     stripped
#         bin/cuda_engine_test  the smoke stage's GPU tests, stripped
#         lib/         every shared library kiln and the smoke tests load (found with ldd; the
#                      CUDA libraries are opened at run time and are not among them), glibc and
#                      its loader included, and the glibc pieces the CUDA libraries load (libdl,
#                      librt, libpthread): the GPU machine is not Debian, so kiln runs there
#                      through lib/ld-linux-x86-64.so.2 on these libraries
#         models/      ONNX skeletons of resnet50, mobilenet_v2, a BERT-base-sized encoder and a
#                      GPT-2-small-sized decode step (one new position after a past of 127)
#                      (bench/gpu_models.py: weights are filled there from a fixed seed)
#         node/        the ONNX node conformance tests ($KILN_ONNX_TESTS_DIR/node)
#   bench/gpu_check.sh run [OUT_DIR]
#       On the GPU machine, from the repository root with the bundle at
#       build-cuda/gpu-bundle.tar.xz (or $KILN_GPU_BUNDLE). Needs the CUDA driver, PyTorch with
#       its CUDA libraries, onnx, numpy and onnxruntime in python3; no apt, nothing built.
#       The CUDA libraries kiln opens (libcublasLt.so.13, libnvrtc.so.13, libcudnn.so.9)
#       come from that machine: PyTorch's wheels (site-packages/nvidia/*/lib, torch/lib),
#       then the toolkit beside nvcc, then the driver's folders (LD_LIBRARY_PATH, ldconfig,
#       /usr/local/nvidia/lib64, ... wherever libcuda.so.1 is) -- that list is kiln's library
#       path (--library-path of the bundled loader, which replaces LD_LIBRARY_PATH); kiln's
#       own search (KILN_CUDA_LIBRARY_PATH, python3's site-packages) comes after it. Stages,
#       each under its own time limit (6 minutes in all), each rewriting
#       OUT_DIR/gpu_check.json (default $OUT, else ./gpu-check-out) so a cut-short run still
#       reports what it measured; on any exit OUT_DIR also gets logs/ (every log and JSON)
#       and gpu_check_results.tar.gz (the whole work folder but the models):
#         1. environment (25 s): `kiln devices --json` (each CUDA library's file and version, or
#            why it is missing), nvidia-smi, torch, the bundle's libraries as the loader resolved them
#         2. smoke (60 s): no GPU, or cuda_engine_test's GPU tests failing, ends the run here
#            with the reason (stop.txt, the report's "stopped"); cuDNN's and cuBLASLt's API logs;
#            a failure is rerun with KILN_CUDA_DEBUG=1 (eager, synchronised per step, the
#            failing step named)
#         3. conformance (90 s): `kiln check --backend cuda` over node/ in parallel shards (each
#            rewrites its JSON after every test and stops at a sticky CUDA error), and the
#            reference backend over the same tests (a test failing on both is not CUDA's)
#         4. models (75 s): materialized (expected outputs from ONNX Runtime; started in the
#            background after stage 1, beside the GPU work of stages 2 and 3) and
#            `kiln check --backend cuda`, also with --nonfinite (NaN/inf/-0/denormal inputs)
#         5. latency (110 s) at batch 1 and 8: `kiln bench --backend cuda` (fp32 and
#            --tf32) against PyTorch eager in two interleaved rounds (Kiln first, then
#            PyTorch first; half the runs each), then torch.compile (default,
#            reduce-overhead, max-autotune-no-cudagraphs) on the same architectures, fp32
#       GPU_CHECK_DRY=1: the rehearsal on a machine without a GPU, every stage on the CPU
#       engine (the smoke stage runs the GPU-free tests), no PyTorch; prints each stage's time.
#       Knobs: GPU_CHECK_SHARDS (8), GPU_CHECK_NO_COMPILE=1 (skip torch.compile),
#       GPU_CHECK_MODELS ("resnet50 mobilenet_v2 bert_base gpt2_step"), GPU_CHECK_RUNS (200).
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
  cmake --build "$build" --target kiln cuda_engine_test || die "build failed"
  local kiln="$build/tools/kiln" smoke="$build/tests/cuda/cuda_engine_test"
  "$kiln" devices --json | grep -q '"compiled":true' || die "$kiln has no CUDA backend (no CUDA toolkit at configure time?)"
  stage="$build/gpu-bundle"
  rm -rf "$stage" && mkdir -p "$stage/bin" "$stage/lib" "$stage/models"
  cp "$kiln" "$stage/bin/kiln" && strip --strip-unneeded "$stage/bin/kiln"
  # The smoke stage's GPU tests (conv, biased Gemm, Softmax, LayerNorm, a host fallback;
  # captured, eager and TF32), run first on the GPU machine.
  cp "$smoke" "$stage/bin/cuda_engine_test" && strip --strip-unneeded "$stage/bin/cuda_engine_test"
  local lib name
  while read -r lib; do
    name="$(basename "$lib")"
    is_cuda_lib "$name" && continue
    cp -L "$lib" "$stage/lib/$name"
  done < <(ldd "$kiln" "$smoke" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\/.*ld-linux/ {print $1}' | sort -u)
  chmod +x "$stage/lib/"ld-linux*.so* || die "no dynamic loader found by ldd"
  # glibc pieces kiln does not link but the CUDA libraries do (libcudnn, libcublasLt and the
  # driver's libcuda need libdl, librt, libpthread): without the bundle's own copies, the
  # host's would load beside the bundled glibc and fail on its private symbols.
  local libc_dir; libc_dir="$(dirname "$(ldd "$kiln" | awk '$1 == "libc.so.6" {print $3}')")"
  for name in libdl.so.2 librt.so.1 libpthread.so.0; do
    [ -e "$stage/lib/$name" ] || cp -L "$libc_dir/$name" "$stage/lib/$name" || die "no $name beside $libc_dir/libc.so.6"
  done
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
  [ -d /usr/local/cuda/lib64 ] && echo /usr/local/cuda/lib64
  driver_lib_dirs
}

# Folders holding the driver's libcuda.so.1. The bundled loader's --library-path replaces
# LD_LIBRARY_PATH, so the machine's LD_LIBRARY_PATH and the folders where a container mounts
# the driver are searched here too, not only what `ldconfig -p` lists.
driver_lib_dirs() {
  local d
  {
    tr ':' '\n' <<< "${LD_LIBRARY_PATH:-}"
    ldconfig -p 2>/dev/null | awk '/libcuda\.so\.1 / {print $NF}' | xargs -r -n1 dirname
    printf '%s\n' /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/lib/wsl/lib
  } | while read -r d; do [ -n "$d" ] && [ -e "$d/libcuda.so.1" ] && echo "$d"; done | awk '!seen[$0]++'
}

phase() {  # phase NAME SECONDS CMD...: runs CMD with a time limit, records its duration
  local name="$1" secs="$2"; shift 2
  local t0=$SECONDS
  echo "== $name (limit ${secs}s)"
  timeout "$secs" "$@"; local rc=$?
  echo "{\"phase\": \"$name\", \"rc\": $rc, \"seconds\": $((SECONDS - t0)), \"limit\": $secs}" >> "$work/phases.jsonl"
  echo "== $name: rc $rc, $((SECONDS - t0)) s of ${secs} s"
  python3 "$root/bench/gpu_report.py" "$work" "$out/gpu_check.json" || true
  return $rc
}

# Everything a failed run needs to be understood comes back in $out: the report, every log
# and JSON of the work folder, and all of it as one tarball. Runs on any exit.
collect() {
  [ -n "${work:-}" ] && [ -d "$work" ] || return 0
  # A run that stopped early leaves no background work behind (materialize's timeout).
  [ -n "${mat_pid:-}" ] && pkill -TERM -P "$mat_pid" 2>/dev/null
  python3 "$root/bench/gpu_report.py" "$work" "$out/gpu_check.json" 2>/dev/null || true
  mkdir -p "$out/logs"
  find "$work" -maxdepth 1 -type f \( -name '*.log' -o -name '*.txt' -o -name '*.json' -o -name '*.jsonl' \) \
    -size -4M -exec cp {} "$out/logs/" \;
  tar -C "$work" --exclude=models -czf "$out/gpu_check_results.tar.gz" . 2>/dev/null || true
  echo "stage times:"
  python3 -c 'import json, sys
for p in map(json.loads, open(sys.argv[1])):
    print("  %-12s %4d s (limit %d s, rc %d)" % (p["phase"], p["seconds"], p.get("limit", 0), p["rc"]))' \
    "$work/phases.jsonl" 2>/dev/null
  echo "report: $out/gpu_check.json; logs: $out/logs; results: $out/gpu_check_results.tar.gz"
}

# The smoke stage: is there a GPU, and do the engine's GPU tests pass? With cuDNN's and
# cuBLASLt's API logs. A failure reruns the failing tests eagerly, synchronised per step
# (KILN_CUDA_DEBUG=1), so the log names the step that faulted. Its reason lands in stop.txt.
smoke() {
  if [ -n "${GPU_CHECK_DRY:-}" ]; then
    "$B/cuda_engine_test" --gtest_filter='CudaEngine*:CudaStatus.*' > "$work/smoke.log" 2>&1 \
      || { echo "smoke tests failed (dry run)" > "$work/stop.txt"; return 1; }
    return 0
  fi
  if ! grep -q '"gpus":\[{' "$work/devices.json" 2>/dev/null; then
    echo "no GPU: $(grep -o '"why_none":"[^"]*"' "$work/devices.json" 2>/dev/null || cat "$work/devices.log")" > "$work/stop.txt"
    return 1
  fi
  CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG="$work/cudnn_api.log" CUBLASLT_LOG_LEVEL=2 CUBLASLT_LOG_FILE="$work/cublaslt_api.log" \
    "$B/cuda_engine_test" --gtest_filter='CudaEngineOnGpu.*:CudaDevices.*' > "$work/smoke.log" 2>&1 && return 0
  KILN_CUDA_DEBUG=1 "$B/cuda_engine_test" --gtest_filter='CudaEngineOnGpu.*' > "$work/smoke_debug.log" 2>&1
  { echo "smoke tests failed:"; grep -E '^\[  FAILED|Failure|step [0-9]+ \(' "$work/smoke.log" "$work/smoke_debug.log" | head -20; } \
    > "$work/stop.txt"
  return 1
}

conformance() {
  local shards="${GPU_CHECK_SHARDS:-8}" i
  [ -d "$B/node" ] || { echo "no conformance tests in the bundle"; return 0; }
  mapfile -t tests < <(find "$B/node" -mindepth 1 -maxdepth 1 -type d | sort)
  for ((i = 0; i < shards; i++)); do
    local part=() j
    for ((j = i; j < ${#tests[@]}; j += shards)); do part+=("${tests[j]}"); done
    # Each shard has its own limit: the phase's timeout would not reach background jobs.
    # kiln check rewrites its JSON after every test and stops at a sticky CUDA error.
    timeout 85 "$KILN" check --backend "$BACKEND" -q --json "$work/conf_cuda_$i.json" "${part[@]}" \
      > "$work/conf_cuda_$i.log" 2>&1 &
    timeout 85 "$KILN" check --backend reference -q --json "$work/conf_ref_$i.json" "${part[@]}" \
      > "$work/conf_ref_$i.log" 2>&1 &
  done
  wait
}

# Filling the models' weights and running ONNX Runtime on them is CPU work: it starts in the
# background after the environment stage, beside the smoke and conformance stages' GPU work.
materialize() {
  timeout 200 python3 "$root/bench/gpu_models.py" materialize --skeletons "$B/models" --out "$work/models" \
    --kiln "$KILN" > "$work/materialize.log" 2>&1
  echo $? > "$work/materialize.rc"
}

models() {
  until [ -f "$work/materialize.rc" ]; do sleep 1; done
  [ "$(cat "$work/materialize.rc")" = 0 ] || return 1
  local m
  for m in ${GPU_CHECK_MODELS:-resnet50 mobilenet_v2 bert_base gpt2_step}; do
    "$KILN" check --backend "$BACKEND" --rtol 1e-3 --atol 1e-4 --json "$work/model_$m.json" "$work/models/$m" \
      > "$work/model_$m.log" 2>&1
  done
  # NaN, +-inf, -0 and denormals planted in the inputs, against the reference on the raw
  # graph: whether cuDNN's fused ReLU and cuBLASLt's epilogues keep NaN as ONNX does.
  for m in ${GPU_CHECK_MODELS:-resnet50 mobilenet_v2 bert_base gpt2_step}; do
    "$KILN" check --backend "$BACKEND" --nonfinite --rtol 1e-3 --atol 1e-4 --json "$work/model_nonfinite_$m.json" \
      "$work/models/$m" > "$work/model_nonfinite_$m.log" 2>&1
  done
}

# One runner's timing of model $1 at batch $2, round $3, $4 runs: bench_<runner>_<m>_<b>_r<round>.json.
time_runner() {
  local runner=$1 m=$2 b=$3 r=$4 runs=$5 f="$work/bench_$1_$2_$3_r$4"
  case "$runner" in
    kiln | kilntf32)
      [ "$runner" = kilntf32 ] && [ "$BACKEND" != cuda ] && return 0
      local tf32=()
      [ "$runner" = kilntf32 ] && tf32=(--tf32)
      "$KILN" bench "$work/models/$m/model.onnx" --backend "$BACKEND" "${tf32[@]}" --batch "$b" \
        --runs "$runs" --warmup 20 --json "$f.json" > /dev/null 2> "$f.log" ;;
    eager)
      [ -n "${GPU_CHECK_DRY:-}" ] && return 0  # no PyTorch CUDA here
      python3 "$root/bench/gpu_models.py" torch-latency --model "$m" --batch "$b" --mode eager \
        --runs "$runs" > "$f.json" 2> "$f.log" ;;
  esac
}

latency() {
  local m b r runner half=$(( (${GPU_CHECK_RUNS:-200} + 1) / 2 ))
  local models="${GPU_CHECK_MODELS:-resnet50 mobilenet_v2 bert_base gpt2_step}"
  # Kiln and PyTorch eager first (seconds each), in two rounds of half the runs, Kiln first
  # then PyTorch first, so neither side always meets the GPU's clocks or the host's load
  # first (the report keeps each round and the better one); then torch.compile (tens of
  # seconds each, resnet50 first): what the phase's limit cuts is the least needed.
  for m in $models; do
    for b in 1 8; do
      for r in 1 2; do
        local order="kiln kilntf32 eager"
        [ "$r" = 2 ] && order="eager kilntf32 kiln"
        for runner in $order; do time_runner "$runner" "$m" "$b" "$r" "$half"; done
      done
    done
  done
  local runs="${GPU_CHECK_RUNS:-200}"
  [ -n "${GPU_CHECK_NO_COMPILE:-}${GPU_CHECK_DRY:-}" ] && return 0
  # torch.compile last (tens of seconds per model), resnet50 first: default, reduce-overhead
  # (CUDA graphs, as Kiln), then max-autotune-no-cudagraphs, the slowest to prepare.
  local mode
  for mode in compile overhead autotune; do
    for m in $models; do
      for b in 1 8; do
        python3 "$root/bench/gpu_models.py" torch-latency --model "$m" --batch "$b" --mode "$mode" --runs "$runs" \
          > "$work/bench_${mode}_${m}_$b.json" 2> "$work/bench_${mode}_${m}_$b.log"
      done
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
  # No empty entry: the loader would read it as the current directory.
  libpath="$B/lib:$(cuda_lib_path | tr ':' '\n' | awk 'NF && !seen[$0]++' | paste -sd: -)"
  echo "kiln library path: $libpath"
  # kiln through the bundled loader on the bundled libraries and the machine's CUDA ones.
  # kiln re-executes itself to set the OpenMP wait policy unless it is set; through the
  # loader it could not, so it is set here.
  KILN="$B/kiln"
  local bin
  for bin in kiln cuda_engine_test; do
    printf '#!/bin/sh\nexport OMP_WAIT_POLICY=PASSIVE GOMP_SPINCOUNT=1000\nexec %s --library-path "%s" "%s" "$@"\n' \
      "$(ls "$B/lib/"ld-linux*.so*)" "$libpath" "$B/bin/$bin" > "$B/$bin"
    chmod +x "$B/$bin"
  done
  # GPU_CHECK_DRY=1: the rehearsal on a machine without a GPU: every stage on the CPU
  # engine (the smoke stage runs the GPU-free tests), no PyTorch, the same limits and times.
  BACKEND=cuda
  [ -n "${GPU_CHECK_DRY:-}" ] && BACKEND=cpu
  export B libpath work root KILN BACKEND
  trap collect EXIT
  # At most 6 minutes in all (a device call is 10): 25 + 60 + 90 + 75 + 110 s.
  phase environment 25 bash -c "$(declare -f environment); environment"
  bash -c "$(declare -f materialize); materialize" &
  mat_pid=$!
  if ! phase smoke 60 bash -c "$(declare -f smoke); smoke"; then
    echo "stopped after the smoke stage: $(cat "$work/stop.txt" 2>/dev/null)"
    return 1
  fi
  phase conformance 90 bash -c "$(declare -f conformance); conformance"
  phase models 75 bash -c "$(declare -f models); models"
  phase latency 110 bash -c "$(declare -f time_runner latency); latency"
  return 0  # a latency stage cut at its limit still reported what it measured
}

case "${1:-}" in
  bundle) shift; bundle "$@" ;;
  run) shift; run "$@" ;;
  *) sed -n '2,49p' "$0"; exit 2 ;;
esac
