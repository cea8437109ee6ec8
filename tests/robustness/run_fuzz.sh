#!/usr/bin/env bash
# Builds tests/robustness/fuzz_importer.cc with clang++ -fsanitize=fuzzer,address,undefined
# (the main build is g++, which has no libFuzzer) and fuzzes the ONNX importer for a bounded
# time, seeded with a few conformance models when ../shared/onnx-tests is there.
#
#   tests/robustness/run_fuzz.sh [--seconds N] [--out DIR] [--jobs N]
#
# Only compiler/onnx/**.cc and compiler/ir/*.cc are compiled (a dozen files), with ccache when
# present, so a rebuild on a 2-core CI machine is quick. Exit status: 0 when the time ran out
# without findings, non-zero on a crash (the reproducer is left in DIR/artifacts).
set -euo pipefail

src="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
seconds=60
out="$src/build-fuzz"
jobs=2
while [[ $# -gt 0 ]]; do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --jobs) jobs="$2"; shift 2 ;;
    *) echo "run_fuzz.sh: unknown option $1" >&2; exit 2 ;;
  esac
done

cxx="${CXX_FUZZ:-$(command -v clang++ || command -v clang++-14 || true)}"
if [[ -z "$cxx" ]]; then
  echo "run_fuzz.sh: clang++ not found; install clang and libclang-rt-dev" >&2
  exit 2
fi
launcher=""
command -v ccache >/dev/null && launcher="ccache"

# libonnx_proto is built with ONNX_ML and namespace onnx (its CMake target says so).
flags=(-std=c++20 -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined
       -fno-sanitize-recover=undefined -DONNX_ML=1 -DONNX_NAMESPACE=onnx -I"$src"
       $(pkg-config --cflags protobuf absl_status absl_statusor absl_strings))
libs=(-lonnx_proto $(pkg-config --libs protobuf absl_status absl_statusor absl_strings))

mkdir -p "$out/obj" "$out/corpus" "$out/artifacts"
sources=("$src"/compiler/onnx/*.cc "$src"/compiler/onnx/normalize/*.cc "$src"/compiler/ir/*.cc "$src"/tests/robustness/fuzz_importer.cc)

# Compile in parallel, at most $jobs at a time; ccache makes a rebuild nearly free.
rm -f "$out"/obj/*.o
pids=()
for s in "${sources[@]}"; do
  o="$out/obj/$(basename "$(dirname "$s")")_$(basename "$s" .cc).o"
  $launcher "$cxx" "${flags[@]}" -c "$s" -o "$o" &
  pids+=($!)
  while (( $(jobs -rp | wc -l) >= jobs )); do sleep 0.2; done
done
for p in "${pids[@]}"; do wait "$p"; done
"$cxx" "${flags[@]}" "$out"/obj/*.o "${libs[@]}" -o "$out/fuzz_importer"

# Seeds: small real models of several opsets (old forms exercise the normalizer).
tests="${KILN_ONNX_TESTS:-$src/../shared/onnx-tests}"
for t in node/test_conv_with_strides_padding node/test_resize_upsample_scales_nearest \
         node/test_split_variable_parts_1d_opset18 node/test_upsample_nearest \
         node/test_clip_default_inbounds node/test_constantofshape_int_zeros \
         node/test_layer_normalization_4d_axis0 pytorch-converted/test_Softmax \
         pytorch-converted/test_BatchNorm2d_eval pytorch-converted/test_PixelShuffle; do
  [[ -f "$tests/$t/model.onnx" ]] && cp "$tests/$t/model.onnx" "$out/corpus/$(basename "$t").onnx"
done

# ASan's allocator limit keeps hostile sizes from turning into host OOM.
ASAN_OPTIONS="${ASAN_OPTIONS:-allocator_may_return_null=1:detect_leaks=1}" \
  "$out/fuzz_importer" -max_total_time="$seconds" -rss_limit_mb=2048 -max_len=65536 \
  -timeout=10 -artifact_prefix="$out/artifacts/" -print_final_stats=1 "$out/corpus"
