#!/usr/bin/env bash
# Issue 15 on the device, one call: decode attention on the tensor-core kernel
# (NITRO_ATTN_DECODE=flash, docs/cuda.md) against the per-query kernel (the default).
#   1. the attention tests (ops and whole models; no ../shared fixtures needed) while llama.cpp's
#      llama-bench builds in the background (if .carry/llama-src.tar.xz is there);
#   2. the sandbox dev_attention_decode (checks, then old / new / flash us per launch by depth);
#   3. with nothing else running: nitro_cuda_bench GPU-all pp512 / tg128 at depths 0, 512 and 4,096
#      per-query, flash, flash, per-query (A B B A) with llama-bench -d 0,512,4096 between them;
#   4. qwen3's decode step by op (--ops) at each setting.
#   bench/attn_decode_device.sh OUT
# Inputs (CARRY_CUDA_BENCH=1 bench/make_carry.sh [--llama] build-cuda): .carry/bin.tar.xz,
# .carry/llama-src.tar.xz (optional). Environment: MODELS (qwen3-30b-a3b,gpt-oss-20b), REPS (3).
# Writes OUT/summary.txt (every figure labelled MEASURED) and OUT/attn-decode-logs.tgz.
set -uo pipefail
RESULTS=${1:?out dir}
T0=$(date +%s); el() { echo "$(( $(date +%s) - T0 )) s"; }
HERE=$(cd "$(dirname "$0")/.." && pwd)
W=/tmp/nitro-dev; R=/tmp/nitro-out/attn; rm -rf "$R"; mkdir -p "$W" "$R" "$RESULTS"
trap 'tar czf "$RESULTS/attn-decode-logs.tgz" -C "$R" . 2>/dev/null' EXIT
[ -f "$HERE/.carry/bin.tar.xz" ] && { rm -rf "$W/bin"; tar xJf "$HERE/.carry/bin.tar.xz" -C "$W"; }
export LD_LIBRARY_PATH="$W/bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" NITRO_SOURCE_DIR="$HERE"
N="$W/bin/nitro"; B="$W/bin/nitro_cuda_bench"; L=/tmp/llama; LB="$L/b/bin/llama-bench"
MODELS=${MODELS:-qwen3-30b-a3b,gpt-oss-20b}; REPS=${REPS:-3}
S="$RESULTS/summary.txt"
{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; "$N" --version | head -1; } | tee "$S"
if [ ! -x "$LB" ] && [ -f "$HERE/.carry/llama-src.tar.xz" ]; then
    mkdir -p "$L"; tar xJf "$HERE/.carry/llama-src.tar.xz" -C "$L"
    ( cd "$L" && cmake -S . -B b -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
        -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_OPENSSL=OFF > "$R/llama_cfg.log" 2>&1 &&
      cmake --build b -j14 --target llama-bench > "$R/llama_build.log" 2>&1 ) &
    BUILD=$!
fi
IFS=, read -ra MS <<< "$MODELS"
SY=()
for m in "${MS[@]}"; do
    [ -f "/dev/shm/$m.gguf" ] && continue
    case "$m" in
        gpt-oss-*) a=(--arch gpt-oss --preset "$m") ;;
        qwen3-30b-a3b) a=(--arch qwen3moe --preset "$m" --type q4_k) ;;
        *) a=(--preset "$m") ;;
    esac
    ( "$N" synth "${a[@]}" -o "/dev/shm/$m.gguf" > "$R/synth_$m.log" 2>&1 ) & SY+=($!)
done
F='CudaOps.*Attention*:CudaOps.FlashDecode*:CudaAttention*:CudaModel.FlashDecode*:CudaModel.DecodeGraph*:CudaModel.Synth*'
timeout 300 "$W/bin/nitro_cuda_tests" --gtest_color=no --gtest_filter="$F" > "$R/tests.log" 2>&1
echo "tests rc=$? at $(el)" | tee -a "$S"
grep -E "^\[  (FAILED|PASSED) |^\[       OK|Failure|flash decode, synth" "$R/tests.log" | cut -c1-200 | tee -a "$S"
for p in "${SY[@]}"; do wait "$p"; done
[ -n "${BUILD:-}" ] && { wait "$BUILD"; echo "llama-bench build rc=$? at $(el)" | tee -a "$S"; }
# --- timed, nothing else running ---
[ -x "$W/bin/dev_attention_decode" ] && { echo "MEASURED sandbox dev_attention_decode" | tee -a "$S"
    timeout 240 "$W/bin/dev_attention_decode" 10 2>&1 | grep -vE "^check .*PASS" | tee -a "$S"; }
nb() {  # model tag setting
    timeout 120 env NITRO_ATTN_DECODE="$3" "$B" "/dev/shm/$1.gguf" --no-kernels --depth 512,4096 --reps "$REPS" > "$R/nitro_$1_$2.txt" 2>&1
    grep "GPU-all" "$R/nitro_$1_$2.txt" | sed "s/^/MEASURED [$2 $3] /" | cut -c1-220 | tee -a "$S"
}
lb() {
    [ -x "$LB" ] || return
    timeout 150 "$LB" -m "/dev/shm/$1.gguf" -ngl 99 -fa 1 -p 512 -n 128 -d 0,512,4096 -r 2 -o json > "$R/llama_$1.json" 2> /dev/null
    python3 - "$R/llama_$1.json" "$1" <<'PY' | tee -a "$S"
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception as e:
    print("llama %s: no result (%s)" % (sys.argv[2], e)); sys.exit(0)
print("MEASURED llama %s: " % sys.argv[2] + ", ".join("%s @ d%d %.1f tok/s" % (
    "pp%d" % r["n_prompt"] if r["n_prompt"] else "tg%d" % r["n_gen"], r.get("n_depth", 0), r["avg_ts"]) for r in d))
PY
}
for m in "${MS[@]}"; do
    echo "side by side: $m at $(el)" | tee -a "$S"
    nb "$m" A per-query; nb "$m" B flash; lb "$m"; nb "$m" C flash; nb "$m" D per-query
done
for v in per-query flash; do
    timeout 60 env NITRO_ATTN_DECODE=$v "$B" "/dev/shm/${MS[0]}.gguf" --no-kernels --depth 4096 --pp 512 --tg 64 --reps 1 --ops > "$R/ops_$v.txt" 2>&1
    echo "MEASURED ${MS[0]} decode step by op at depth 4,096, $v:" | tee -a "$S"
    grep -A14 "by op" "$R/ops_$v.txt" | tee -a "$S"
done
echo "done at $(el)" | tee -a "$S"
