#!/usr/bin/env bash
# Token generation benchmark: makes a decoder with tests/models/$DECODER (decoder_step.py, the
# GPT-2-style one, by default; llama_step.py the LLaMA-style one; its size from DECODER_ARGS), serves it from kilnd with a generation config, and runs bench/generate.js
# (Kiln's server loop vs ONNX Runtime's decode loop over the same model). A benchmark, not a
# test: prints tokens/s, time to first token and inter-token latency for both.
#   bench/generate.sh [--prompts 32,64,128,256] [--new 64] [--streams 16] [--rounds 3]
#                     [--peer ort|none] [--json FILE]
# Env: BUILD (default build), DECODER_ARGS (default "--hidden 256 --layers 4 --heads 4
# --vocab 8000"), DIMS (default "{past_sequence_length: [1, 511], sequence: {min: 1, max: 64, classes: [1, 64]}}"),
# MAX_BATCH (default 8), THREADS (default 2), INSTANCES (default 1: the model's `instances`,
# steps of one iteration side by side, each engine on THREADS / INSTANCES threads; with
# INSTANCES > 1 and THREADS the machine's cores kilnd chooses the team itself, so a step that
# runs alone takes every core (docs/generation.md, Wide runs); NARROW=1 pins each engine to
# its share instead), PREFILL_LOGITS (last, the default, or all),
# KV_IN_PLACE (auto or off), PREFILL_BUDGET (256), PRECISION (float32 by default; auto: bf16 where
# the warm-up check allows it, docs/server.md Precision), CACHE_MASK (auto, the default: a
# decoder exported without a mask gets one, and one that counts its positions from its cache's
# length reads them from its mask; off: both run at exact cache lengths).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD:-$root/build}"
work="$(mktemp -d)"
trap 'kill "${pid:-}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
mkdir -p "$work/models/dec/1"
/usr/bin/python3 "$root/tests/models/${DECODER:-decoder_step.py}" --write "$work/src" \
  ${DECODER_ARGS:---hidden 256 --layers 4 --heads 4 --vocab 8000}
cp "$work/src/model.onnx" "$work/models/dec/1/"
per_instance=$(( ${THREADS:-2} / ${INSTANCES:-1} > 0 ? ${THREADS:-2} / ${INSTANCES:-1} : 1 ))
cpu_threads=$per_instance
if [ "${INSTANCES:-1}" -gt 1 ] && [ "${THREADS:-2}" = "$(nproc)" ] && [ "${NARROW:-0}" != 1 ]; then
  cpu_threads=0  # kilnd's own choice: wide runs
fi
cat > "$work/models/dec/config.yaml" <<YAML
device: cpu
max_batch_size: ${MAX_BATCH:-8}
instances: ${INSTANCES:-1}
cpu_threads: $cpu_threads
dynamic_dims: ${DIMS:-"{past_sequence_length: [1, 511], sequence: {min: 1, max: 64, classes: [1, 64]}}"}
generation: {kv_cache_bytes: 1073741824, max_sequences: 16, prefill_chunk: ${PREFILL_CHUNK:-64}, prefill_budget: ${PREFILL_BUDGET:-256}, kv_in_place: ${KV_IN_PLACE:-auto}, prefill_logits: ${PREFILL_LOGITS:-last}, cache_mask: ${CACHE_MASK:-auto}}
precision: {mode: ${PRECISION:-float32}}
YAML
port=$((20000 + RANDOM % 20000))
"$build/server/kilnd" --model-repository "$work/models" --grpc-address "127.0.0.1:$((port + 1))" \
  --http-address "127.0.0.1:$port" > "$work/kilnd.log" 2>&1 &
pid=$!
start=$(date +%s)
until curl -sf "http://127.0.0.1:$port/readyz" > /dev/null; do
  kill -0 "$pid" 2>/dev/null || { cat "$work/kilnd.log"; exit 1; }
  sleep 1
done
echo "generate: kilnd READY in $(( $(date +%s) - start )) s"
grep -o "prefill .*" "$work/kilnd.log" || true
grep -o "wide runs: .*" "$work/kilnd.log" | head -1 || true
grep -o "version 1: precision .*" "$work/kilnd.log" || true
grep -o "version 1: input '.*' added.*\|version 1: positions read from.*\|version 1: steps run at exact cache lengths.*" "$work/kilnd.log" || true
# kilnd's CPU time while serving (user + system, clock ticks from /proc): steadier than wall
# time on a shared host, and only Kiln's side (ONNX Runtime runs in the node process).
cpu_ms() { awk -v hz="$(getconf CLK_TCK)" '{print int(($14 + $15) * 1000 / hz)}' "/proc/$pid/stat"; }
cpu0=$(cpu_ms)
node "$root/bench/generate.js" --url "http://127.0.0.1:$port" --model dec --onnx "$work/src/model.onnx" --pid "$pid" \
  --threads "${THREADS:-2}" "$@"
echo "kilnd CPU while serving: $(( $(cpu_ms) - cpu0 )) ms"
