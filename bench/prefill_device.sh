#!/usr/bin/env bash
# Prompt processing in hybrid placement (issue 14, docs/hybrid.md "Prompts") on the lent GPU
# machine, in two calls of one warm machine:
#   bench/prefill_device.sh prepare OUT   llama-bench build (background) + the CUDA tests that need
#                                         no shared fixtures + nitro synth gpt-oss-120b in /dev/shm
#   bench/prefill_device.sh bench OUT     timed, nothing else running: nitro hybrid (cost model
#                                         auto, and cpu = every off-GPU expert on the CPU) against
#                                         llama-bench -ncmoe 31 (ubatch 512 for 512 tokens, 2048
#                                         and 4096 above), mirrored; RESULTS/summary.txt grows run by run
#   bench/prefill_device.sh staging OUT   nitro_cuda_bench --staging on the same file: fill rates
#                                         (memcpy / non-temporal stores, write-combined / cached
#                                         pinned, 4-16 threads), copy rates, cudaHostRegister in place
#                                         (needs bin.tar.xz made with CARRY_CUDA_BENCH=1)
# Inputs from .carry/ (bench/make_carry.sh --llama): bin.tar.xz, llama-src.tar.xz.
# Environment: BUDGET (GiB, 12), NCMOE (31), PROMPTS (512,4096,13000), UB (nitro --ubatch, 4096),
# PRESET (gpt-oss-120b), VARIANTS (sweep), FILTER (gtest filter of prepare's tests), MIRROR (1: the B half too),
# CPU_BASELINE (1: also --prefill-cost-model cpu on 4,096 tokens), MODEL (/dev/shm/bench.gguf: another
# file for bench/sweep), NITRO_OPTS (extra nitro options of every run), LLAMA_UB (llama-bench's ubatch
# list above 512 tokens, 2048,4096).
set -uo pipefail
PHASE=${1:?phase}; RESULTS=${2:?out dir}
OUTD=/tmp/nitro-out/$PHASE; rm -rf "$OUTD"; mkdir -p "$OUTD"
trap 'tar czf "$RESULTS/$PHASE-logs.tgz" -C "$OUTD" . 2>/dev/null' EXIT
HERE=$(cd "$(dirname "$0")/.." && pwd)
W=/tmp/nitro-dev; mkdir -p "$W"
[ -f "$HERE/.carry/bin.tar.xz" ] && { rm -rf "$W/bin"; tar xJf "$HERE/.carry/bin.tar.xz" -C "$W"; }
export LD_LIBRARY_PATH="$W/bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
N="$W/bin/nitro"; M=${MODEL:-/dev/shm/bench.gguf}
export NITRO_SOURCE_DIR="$HERE"  # tests/data (the qwen3next fixture) of this checkout
BUDGET=${BUDGET:-12}; NCMOE=${NCMOE:-31}; PROMPTS=${PROMPTS:-512,4096,13000}; UB=${UB:-4096}; PRESET=${PRESET:-gpt-oss-120b}
L=/tmp/llama; LB="$L/b/bin/llama-bench"
# The CUDA tests that need no ../shared fixtures (those do not fit beside the binaries in a call)
FILTER=${FILTER:-'CudaHybrid.PromptPaths*:CudaHybrid.StagedPrompt*:CudaAdaptive.LiveEquals*:CudaOps.*:CudaQwen3Next.*:CudaBatch.*:CudaModel.Synth*'}
log() { echo "[$(date -u +%H:%M:%S)] $*"; }

# One nitro hybrid run of a NP-token prompt, its summary line appended to RESULTS/summary.txt.
bench_one() {  # $1 tag, $2 prompt tokens, $3.. extra options; env THREADS_RUN (16), UB_RUN ($UB)
    local tag=$1 np=$2; shift 2
    timeout 300 "$N" run -m "$M" --prompt-ids "$(seq -s, 1000 $((1000 + np - 1)))" -n 1 --ignore-eos -t "${THREADS_RUN:-16}" --mode hybrid \
        --vram-budget "$BUDGET" -u "${UB_RUN:-$UB}" -c $((${maxp:-$np} + 256)) --json -v ${NITRO_OPTS:-} "$@" > "$OUTD/nitro_$tag.json" 2> "$OUTD/nitro_$tag.err"
    python3 - "$OUTD/nitro_$tag.json" "$tag" "$np" <<'PY' | tee -a "$RESULTS/summary.txt"
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception as e:
    print("nitro %s: no result (%s)" % (sys.argv[2], e)); sys.exit(0)
t = d["timings"]; e = d.get("experts", {}); p = e.get("prompt", {})
print("MEASURED nitro %-14s pp%-6s %8.1f tok/s  TTFT %7.0f ms | staged %5d experts (%d in place) %6.2f GB in %6.0f ms (%.1f GB/s), CPU %5d experts %6.0f ms, resident %5d, GPU idle %5.0f ms, groups %d"
      % (sys.argv[2], sys.argv[3], t["prompt_tok_s"], t.get("ttft_ms", 0), p.get("staged_experts", 0), p.get("staged_in_place", 0),
         p.get("staged_bytes", 0) / 1e9, p.get("stage_ms", 0), p.get("staged_gb_s", 0), p.get("cpu_experts", 0), p.get("cpu_ms", 0),
         p.get("resident_experts", 0), p.get("gpu_idle_ms", 0), e.get("prompt_groups", 0)))
PY
    grep "prompt staging:\|pinned in place\|prefill-pin" "$OUTD/nitro_$tag.err" | head -3 | tee -a "$RESULTS/summary.txt"
}

case "$PHASE" in
prepare)
    { date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc; "$N" --version; } | tee "$OUTD/env.txt"
    if [ ! -x "$LB" ]; then
        mkdir -p "$L"; tar xJf "$HERE/.carry/llama-src.tar.xz" -C "$L"
        log "llama-bench build started (background)"
        ( cd "$L" && cmake -S . -B b -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
            -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_OPENSSL=OFF > "$OUTD/llama_cfg.log" 2>&1 &&
          cmake --build b -j12 --target llama-bench > "$OUTD/llama_build.log" 2>&1 ) &
        BUILD=$!
    fi
    log "cuda tests: $FILTER"
    "$W/bin/nitro_cuda_tests" --gtest_color=no --gtest_filter="$FILTER" > "$OUTD/cuda_tests.log" 2>&1; echo "cuda tests rc=$?"
    grep -E "^\[  (FAILED|PASSED) |^\[ +OK|^\[  FAILED|Failure|rror|max \|diff\||prompt experts|argmax agrees" "$OUTD/cuda_tests.log" | tail -70
    if [ "$(cat "$M.key" 2>/dev/null)" != "$PRESET" ]; then
        rm -f /dev/shm/*.gguf /dev/shm/*.gguf.key
        log "synth $PRESET"
        "$N" synth --arch gpt-oss --preset "$PRESET" -o "$M" > "$OUTD/synth.log" 2>&1 && echo "$PRESET" > "$M.key" || tail -3 "$OUTD/synth.log"
    fi
    [ -n "${BUILD:-}" ] && { wait "$BUILD"; log "llama-bench build rc=$?"; tail -2 "$OUTD/llama_build.log"; }
    ls -la "$LB" 2>&1 | tail -1
    ;;
bench)
    [ -x "$LB" ] || { echo "no llama-bench (run prepare first)"; exit 1; }
    [ -f "$M" ] || { echo "no model (run prepare first)"; exit 1; }
    maxp=$(echo "$PROMPTS" | tr , '\n' | sort -n | tail -1)
    # Every run appends its summary line to RESULTS/summary.txt at once, so a call that runs out
    # of time still brings back what it measured.
    S="$RESULTS/summary.txt"
    run_llama() {  # $1 tag, $2 prompt tokens, $3 ubatch list: llama-bench runs every pair, so one prompt per call
        timeout 300 "$LB" -m "$M" -ngl 99 -ncmoe "$NCMOE" -fa 1 -t 16 -p "$2" -n 0 -b 4096 -ub "$3" -r 1 -o json \
            > "$OUTD/llama_$1_$2.json" 2> "$OUTD/llama_$1_$2.err" || tail -3 "$OUTD/llama_$1_$2.err"
        python3 - "$OUTD/llama_$1_$2.json" "$1" <<'PY' | tee -a "$S"
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception as e:
    print("llama %s: no result (%s)" % (sys.argv[2], e)); sys.exit(0)
for r in d: print("MEASURED llama %-4s pp%-6d ubatch %-5d %8.1f tok/s" % (sys.argv[2], r["n_prompt"], r["n_ubatch"], r["avg_ts"]))
PY
    }
    # llama.cpp's ubatch per prompt: 512 for 512 tokens; 2048 and 4096 above (512 runs a 4,096-token
    # prompt at ~71 tok/s on this machine, ../shared/PEERS.md: minutes for nothing).
    llama_all() { for p in "${PS[@]}"; do if [ "$p" -le 512 ]; then run_llama "$1" "$p" 512; else run_llama "$1" "$p" "${LLAMA_UB:-2048,4096}"; fi; done; }
    log "nitro bench -p 4 -n 2 (read probe)"; "$N" bench -m "$M" -p 4 -n 2 -t 16 --kernels none > "$OUTD/nitro_bench.txt" 2>&1
    grep -iE "memory read" "$OUTD/nitro_bench.txt" | head -2 | tee -a "$S"
    log "timed runs: $PRESET, budget $BUDGET GiB, nitro -u $UB; llama.cpp -ncmoe $NCMOE; mirrored" | tee -a "$S"
    IFS=, read -ra PS <<< "$PROMPTS"
    for p in "${PS[@]}"; do bench_one "auto-$p-a" "$p"; done
    [ "${CPU_BASELINE:-1}" = 1 ] && bench_one "cpu-4096-a" 4096 --prefill-cost-model cpu
    llama_all A
    [ "${MIRROR:-1}" = 1 ] && {
        llama_all B
        [ "${CPU_BASELINE:-1}" = 1 ] && bench_one "cpu-4096-b" 4096 --prefill-cost-model cpu
        for ((i = ${#PS[@]} - 1; i >= 0; i--)); do bench_one "auto-${PS[$i]}-b" "${PS[$i]}"; done
    }
    ;;
sweep)
    # nitro alone, one run per variant: VARIANTS="tag|prompt tokens|threads|ubatch|extra options;..."
    # (e.g. the cost model's modes, fill threads), to choose between pipeline designs; no peer.
    [ -f "$M" ] || { echo "no model (run prepare first)"; exit 1; }
    S="$RESULTS/summary.txt"
    maxp=${MAXP:-13000}
    IFS=';' read -ra VS <<< "${VARIANTS:?VARIANTS}"
    for v in "${VS[@]}"; do
        IFS='|' read -r tag np thr ub opts <<< "$v"
        log "sweep $tag: pp$np -t $thr -u $ub $opts" | tee -a "$S"
        # shellcheck disable=SC2086
        THREADS_RUN=$thr UB_RUN=$ub bench_one "$tag" "$np" $opts
    done
    ;;
staging)
    [ -f "$M" ] || { echo "no model (run prepare first)"; exit 1; }
    "$W/bin/nitro_cuda_bench" "$M" --staging --threads "${THREADS:-4,8,16}" 2>&1 | tee "$RESULTS/staging.txt"
    ;;
*) echo "unknown phase $PHASE"; exit 2 ;;
esac
