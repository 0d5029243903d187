#!/usr/bin/env bash
# Issue 15 on the device (GPU-all kernels), one call: the CUDA tests that need no ../shared
# fixtures while llama.cpp's llama-bench builds in the background, the synth models, then, with
# nothing else running, timed side by side: nitro_cuda_bench's kernel figures (GEMV per type and
# path, decode MoE) and pp/tg of nitro and llama.cpp GPU-all on the same files, mirrored
# (nitro, llama, llama, nitro).
#   bench/kernels_device.sh OUT
# Inputs from .carry/ (CARRY_CUDA_BENCH=1 bench/make_carry.sh --llama build-cuda): bin.tar.xz,
# llama-src.tar.xz. Environment: MODELS (gpt-oss-20b,qwen3-30b-a3b), PP (512), TG (128),
# REPS (3), FILTER (gtest filter), TESTS (1), KERNELS (1: nitro_cuda_bench's kernel figures), OPS
# (1: each model's decode step by op, nitro_cuda_bench --ops), SIDE (1: the side-by-side runs). A
# second call on the still-warm machine (TESTS=0 KERNELS=0 PP=4096) reuses llama-bench and the models.
set -uo pipefail
RESULTS=${1:?out dir}
OUTD=/tmp/nitro-out/kernels; rm -rf "$OUTD"; mkdir -p "$OUTD"
trap 'tar czf "$RESULTS/kernels-logs.tgz" -C "$OUTD" . 2>/dev/null' EXIT
HERE=$(cd "$(dirname "$0")/.." && pwd)
W=/tmp/nitro-dev; mkdir -p "$W"
[ -f "$HERE/.carry/bin.tar.xz" ] && { rm -rf "$W/bin"; tar xJf "$HERE/.carry/bin.tar.xz" -C "$W"; }
export LD_LIBRARY_PATH="$W/bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export NITRO_SOURCE_DIR="$HERE"
N="$W/bin/nitro"; L=/tmp/llama; LB="$L/b/bin/llama-bench"
MODELS=${MODELS:-gpt-oss-20b,qwen3-30b-a3b}; PP=${PP:-512}; TG=${TG:-128}; REPS=${REPS:-3}
FILTER=${FILTER:-'Q8DotHost.*:CudaOps.*:CudaModel.Synth*:CudaHybrid.PromptPaths*:CudaHybrid.StagedPrompt*:CudaBatch.*:CudaQwen3Next.*:CudaAdaptive.LiveEquals*'}
S="$RESULTS/summary.txt"
log() { echo "[$(date -u +%H:%M:%S)] $*"; }
{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc; "$N" --version | head -3; } | tee "$RESULTS/env.txt"
if [ ! -x "$LB" ]; then
    mkdir -p "$L"; tar xJf "$HERE/.carry/llama-src.tar.xz" -C "$L"
    log "llama-bench build started (background)"
    ( cd "$L" && cmake -S . -B b -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
        -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_OPENSSL=OFF > "$OUTD/llama_cfg.log" 2>&1 &&
      cmake --build b -j12 --target llama-bench > "$OUTD/llama_build.log" 2>&1 ) &
    BUILD=$!
fi
if [ "${TESTS:-1}" = 1 ]; then
    log "cuda tests: $FILTER"
    "$W/bin/nitro_cuda_tests" --gtest_color=no --gtest_filter="$FILTER" > "$OUTD/cuda_tests.log" 2>&1; echo "cuda tests rc=$?" | tee -a "$S"
    grep -E "^\[  (FAILED|PASSED) |^\[  FAILED|Failure|GEMV:|worst" "$OUTD/cuda_tests.log" | tail -40 | tee -a "$S"
fi
IFS=, read -ra MS <<< "$MODELS"
for m in "${MS[@]}"; do
    f=/dev/shm/$m.gguf
    [ -f "$f" ] && continue
    case "$m" in
        gpt-oss-*) a=(--arch gpt-oss --preset "$m") ;;
        qwen3-30b-a3b) a=(--arch qwen3moe --preset "$m" --type q4_k) ;;
        *) a=(--preset "$m") ;;
    esac
    log "synth $m"; "$N" synth "${a[@]}" -o "$f" > "$OUTD/synth_$m.log" 2>&1 || tail -3 "$OUTD/synth_$m.log"
done
[ -n "${BUILD:-}" ] && { wait "$BUILD"; log "llama-bench build rc=$?"; tail -2 "$OUTD/llama_build.log"; }
# --- timed, nothing else running ---
if [ "${KERNELS:-1}" = 1 ]; then
    log "kernel figures" | tee -a "$S"
    "$W/bin/nitro_cuda_bench" "/dev/shm/${MS[0]}.gguf" --pp 0 --tg 0 2>&1 | tee "$OUTD/kernels.txt" | grep -vE "^$" | tee -a "$S"
    [ -x "$W/bin/dev_moe_gemm" ] && { log "kernel sandbox: moe_gemm" | tee -a "$S"; "$W/bin/dev_moe_gemm" 10 2>&1 | tee -a "$S"; }
    [ -x "$W/bin/dev_moe_mmq" ] && { log "kernel sandbox: moe_mmq" | tee -a "$S"; "$W/bin/dev_moe_mmq" 10 2>&1 | tee -a "$S"; }
    [ -x "$W/bin/dev_attention" ] && { log "kernel sandbox: attention" | tee -a "$S"; "$W/bin/dev_attention" 10 2>&1 | tee -a "$S"; }
fi
if [ "${OPS:-1}" = 1 ]; then
    for m in "${MS[@]}"; do
        log "decode step by op: $m" | tee -a "$S"
        "$W/bin/nitro_cuda_bench" "/dev/shm/$m.gguf" --no-kernels --pp 512 --tg 64 --reps 1 --ops 2>&1 | tee "$OUTD/ops_$m.txt" | grep -vE "^$" | tee -a "$S"
    done
fi
[ "${SIDE:-1}" = 1 ] || { log done; exit 0; }
nitro_run() {  # $1 model, $2 tag
    "$W/bin/nitro_cuda_bench" "/dev/shm/$1.gguf" --no-kernels --pp "$PP" --tg "$TG" --reps "$REPS" > "$OUTD/nitro_$1_$2.txt" 2>&1
    grep -E "tok/s|launches" "$OUTD/nitro_$1_$2.txt" | sed "s/^/MEASURED nitro $1 $2: /" | tee -a "$S"
}
llama_run() {
    [ -x "$LB" ] || { echo "no llama-bench" | tee -a "$S"; return; }
    "$LB" -m "/dev/shm/$1.gguf" -ngl 99 -fa 1 -p "$PP" -n "$TG" -r "$REPS" -o json > "$OUTD/llama_$1_$2.json" 2> "$OUTD/llama_$1_$2.err"
    python3 - "$OUTD/llama_$1_$2.json" "$1 $2" <<'PY' | tee -a "$S"
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception as e:
    print("llama %s: no result (%s)" % (sys.argv[2], e)); sys.exit(0)
for r in d:
    kind = "pp%d" % r["n_prompt"] if r["n_prompt"] else "tg%d" % r["n_gen"]
    print("MEASURED llama %s: %s %.1f tok/s" % (sys.argv[2], kind, r["avg_ts"]))
PY
}
for m in "${MS[@]}"; do
    log "side by side: $m" | tee -a "$S"
    nitro_run "$m" A; llama_run "$m" A; llama_run "$m" B; nitro_run "$m" B
done
log done
