#!/usr/bin/env bash
# Builds one libFuzzer target with clang++ -fsanitize=fuzzer,address,undefined (the main
# build is g++, which has no libFuzzer) and fuzzes it for a bounded time.
#
#   tests/robustness/run_fuzz.sh [--target T] [--seconds N] [--out DIR] [--jobs N] [--build DIR]
#
# Targets:
#   importer  compiler/onnx + ir (fuzz_importer.cc), seeded with conformance models
#             when ../shared/onnx-tests is there
#   predict   Predict/BatchPredict decoding and validation (fuzz_predict.cc)
#   upload    LoadModel's stream handling, staging and commit (fuzz_upload.cc)
#   config    the server and model YAML configs (fuzz_config.cc)
#   v2json    the KServe v2 REST bodies' JSON and the tensors read from it (fuzz_v2json.cc)
#   http      the HTTP port's reading of a request head and the bearer rule (fuzz_http.cc)
# The server targets compile the server sources under test with the sanitizers and link the
# rest (generated protos, compiler libraries) from an existing CMake build, --build DIR
# (default: build): the code under test is instrumented, its dependencies are not. Their seeds
# are committed in tests/robustness/corpus/<target>/ and copied to DIR/corpus-<target>, where
# what the fuzzer adds stays.
#
# Sources compile with ccache when present, so a rebuild on a 2-core CI machine is quick.
# Exit status: 0 when the time ran out without findings, non-zero on a crash (the reproducer
# is left in DIR/artifacts-<target>; run it with DIR/fuzz_<target> FILE).
set -euo pipefail

src="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
target=importer
seconds=60
out="$src/build-fuzz"
jobs=2
build="$src/build"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --target) target="$2"; shift 2 ;;
    --seconds) seconds="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --jobs) jobs="$2"; shift 2 ;;
    --build) build="$2"; shift 2 ;;
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
       $(pkg-config --cflags protobuf absl_status absl_statusor absl_strings absl_flat_hash_map \
         absl_flat_hash_set))
# The IR's graph edits and verifier use abseil's flat hash containers.
base_libs=($(pkg-config --libs protobuf absl_status absl_statusor absl_strings absl_flat_hash_map \
             absl_flat_hash_set))
# The server targets' uninstrumented dependencies: every library the CMake build made below
# base/, proto/, ir/, ops/, compiler/ and runtime/, and the server's generation library below the rest of it
# (the linker takes only the members the targets use; the server's own library is left out,
# its sources under test are compiled here instead).
server_libs=(-Wl,--start-group
             $(find "$build/base" "$build/proto" "$build/ir" "$build/ops" "$build/compiler" "$build/runtime" -name 'libkiln_*.a' \
                 -not -path '*/CMakeFiles/*' 2>/dev/null | sort)
             "$build/server/generate/libkiln_generate.a"
             -Wl,--end-group -lonnx_proto $(pkg-config --libs spdlog yaml-cpp) -lgomp)

case "$target" in
  importer)
    sources=("$src"/compiler/onnx/*.cc "$src"/compiler/onnx/normalize/*.cc "$src"/ir/*.cc
             "$src"/base/*.cc)
    libs=(-lonnx_proto "${base_libs[@]}") ;;
  predict)
    sources=("$src"/server/serving/request_validation.cc "$src"/server/serving/tensor_codec.cc
             "$src"/server/serving/kserve_tensor.cc "$src"/base/json.cc)
    libs=("${server_libs[@]}" "${base_libs[@]}") ;;
  upload)
    sources=("$src"/server/repository/upload.cc "$src"/server/repository/model_repository.cc
             "$src"/server/common/files.cc "$src"/server/model/model_config.cc)
    libs=("${server_libs[@]}" "${base_libs[@]}") ;;
  v2json)
    sources=("$src"/base/json.cc "$src"/server/serving/kserve_tensor.cc)
    libs=("${server_libs[@]}" "${base_libs[@]}") ;;
  http)
    sources=("$src"/server/http/http_listener.cc "$src"/server/common/auth.cc)
    libs=("${server_libs[@]}" "${base_libs[@]}") ;;
  config)
    sources=("$src"/server/serving/config.cc "$src"/server/model/model_config.cc
             "$build"/server/serving/embedded_config.cc)
    libs=("${server_libs[@]}" "${base_libs[@]}") ;;
  *) echo "run_fuzz.sh: unknown target $target (importer|predict|upload|config|v2json|http)" >&2; exit 2 ;;
esac
sources+=("$src/tests/robustness/fuzz_$target.cc")
if [[ "$target" != importer ]]; then
  if [[ ! -f "$build/proto/libkiln_proto.a" ]]; then
    echo "run_fuzz.sh: --build $build has no libkiln_proto.a: build kilnd there first" >&2
    exit 2
  fi
  # spdlog as the main build uses it (the shared library, with the system fmt).
  flags+=(-isystem "$build/proto" $(pkg-config --cflags spdlog yaml-cpp))
fi

obj="$out/obj-$target"
corpus="$out/corpus-$target"
artifacts="$out/artifacts-$target"
mkdir -p "$obj" "$corpus" "$artifacts"

# Compile in parallel, at most $jobs at a time; ccache makes a rebuild nearly free.
rm -f "$obj"/*.o
pids=()
for s in "${sources[@]}"; do
  o="$obj/$(basename "$(dirname "$s")")_$(basename "$s" .cc).o"
  # RapidJSON 1.1's internal stack computes `null + n` before its first allocation (an
  # upstream bug, harmless in practice); only that check is off, and only in the file that
  # instantiates its reader.
  extra=()
  [[ "$s" == */base/json.cc ]] && extra=(-fno-sanitize=pointer-overflow)
  $launcher "$cxx" "${flags[@]}" "${extra[@]}" -c "$s" -o "$o" &
  pids+=($!)
  while (( $(jobs -rp | wc -l) >= jobs )); do sleep 0.2; done
done
for p in "${pids[@]}"; do wait "$p"; done
"$cxx" "${flags[@]}" "$obj"/*.o "${libs[@]}" -o "$out/fuzz_$target"

if [[ "$target" == importer ]]; then
  # Seeds: small real models of several opsets (old forms exercise the normalizer).
  tests="${KILN_ONNX_TESTS:-$src/../shared/onnx-tests}"
  for t in node/test_conv_with_strides_padding node/test_resize_upsample_scales_nearest \
           node/test_split_variable_parts_1d_opset18 node/test_upsample_nearest \
           node/test_clip_default_inbounds node/test_constantofshape_int_zeros \
           node/test_layer_normalization_4d_axis0 pytorch-converted/test_Softmax \
           pytorch-converted/test_BatchNorm2d_eval pytorch-converted/test_PixelShuffle; do
    [[ -f "$tests/$t/model.onnx" ]] && cp "$tests/$t/model.onnx" "$corpus/$(basename "$t").onnx"
  done
else
  cp -n "$src/tests/robustness/corpus/$target"/* "$corpus/" 2>/dev/null || true
fi

# ASan's allocator limit keeps hostile sizes from turning into host OOM.
ASAN_OPTIONS="${ASAN_OPTIONS:-allocator_may_return_null=1:detect_leaks=1}" \
  "$out/fuzz_$target" -max_total_time="$seconds" -rss_limit_mb=2048 -max_len=65536 \
  -timeout=10 -artifact_prefix="$artifacts/" -print_final_stats=1 "$corpus"
