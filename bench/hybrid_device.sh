#!/usr/bin/env bash
# The hybrid executor on the lent GPU machine, one call per phase (docs/hybrid.md, "Benchmark"):
#   bench/hybrid_device.sh tests OUT      the CUDA tests (ops, GPU-all, hybrid) + a quick hybrid run
#   bench/hybrid_device.sh bench OUT      nitro hybrid vs llama.cpp --n-cpu-moe, side by side
#   bench/hybrid_device.sh bench-zipf OUT the same on a file with a skewed router (ZIPF=S, default
#                                         0.7: top 10% of experts take ~40% of the routing) + a hot set
#   bench/hybrid_device.sh prepare[-zipf] OUT  only synthesize the model bench[-zipf] uses
# Inputs come from .carry/ (git-ignored; made on the development machine):
#   bin.tar.xz       bin/{nitro,nitro_cuda_tests,nitro_cuda_bench} built for sm_90 + the Debian
#                    shared libraries they need (libfmt, libxxhash, libpcre2, libcpp-httplib)
#   fixtures.tar.xz  shared/fixtures (the tiny GGUFs and their llama.cpp goldens)
#   llama-src.tar.xz llama.cpp 80fb11a's source (node-llama-cpp's bundle, git archive, without
#                    models/docs/tests) for llama-bench with CUDA
set -uo pipefail
PHASE=${1:?phase}; RESULTS=${2:?out dir}
# Logs go to a work folder, packed into one RESULTS/PHASE-logs.tgz at the end (the device tool
# brings back at most 8 files).
OUTD=/tmp/nitro-out/$PHASE; rm -rf "$OUTD"; mkdir -p "$OUTD"
trap 'tar czf "$RESULTS/$PHASE-logs.tgz" -C "$OUTD" . 2>/dev/null' EXIT
exec 3>&1
HERE=$(cd "$(dirname "$0")/.." && pwd)
W=/tmp/nitro-dev; mkdir -p "$W"
[ "$PHASE" = build-llama ] || { rm -rf "$W/bin"; tar xJf "$HERE/.carry/bin.tar.xz" -C "$W"; }
export LD_LIBRARY_PATH="$W/bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
N="$W/bin/nitro"
log() { echo "[$(date -u +%H:%M:%S)] $*"; }
gpu_mem() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1; }
# Samples the GPU's used memory (MiB) every 50 ms into $1 while $2.. runs; prints the peak.
with_mem_peak() {
    local f=$1; shift
    ( while :; do gpu_mem >> "$f"; sleep 0.05; done ) & local s=$!
    "$@"; local rc=$?
    kill $s 2>/dev/null; wait $s 2>/dev/null
    echo "peak GPU memory used: $(sort -n "$f" | tail -1) MiB (device total, sampled every 50 ms)" >&3
    return $rc
}
PROMPT=$(seq -s, 100 163)   # 64 token ids

case "$PHASE" in
tests)
    tar xJf "$HERE/.carry/fixtures.tar.xz" -C "$W"
    export NITRO_SHARED_DIR="$W/shared"
    { date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc; "$N" --version; } | tee "$OUTD/env.txt"
    log "cuda tests"
    "$W/bin/nitro_cuda_tests" --gtest_color=no > "$OUTD/cuda_tests.log" 2>&1; echo "cuda tests rc=$?"
    grep -E "^\[  (FAILED|PASSED) |^\[ +OK|FAILED|Failure|  gpt|  tiny|argmax|peak" "$OUTD/cuda_tests.log" | tail -60
    [ "${SMOKE:-1}" = 1 ] || exit 0
    log "synth gpt-oss-20b"
    "$N" synth --arch gpt-oss --preset gpt-oss-20b -o /dev/shm/g20.gguf > /dev/null 2>&1
    log "hybrid smoke: gpt-oss-20b, 64-token prompt, 64 decode steps, 16 threads"
    for args in "--mode gpu" "--mode hybrid --vram-budget 4" "--mode hybrid --vram-budget 8" "--mode hybrid --cpu-moe --vram-budget 8"; do
        echo "== $args"
        with_mem_peak "$OUTD/mem_$(echo "$args" | tr -c 'a-z0-9' _).txt" \
            "$N" run -m /dev/shm/g20.gguf --prompt-ids "$PROMPT" -n 64 --ignore-eos -t 16 $args -v 2> "$OUTD/run_err.txt" > /dev/null
        grep -E "experts:|prompt:|error" "$OUTD/run_err.txt"
    done
    ;;
prepare|prepare-zipf|bench|bench-zipf)
    # Side by side, mirrored (nitro, llama.cpp, llama.cpp, nitro), same file, same VRAM budget,
    # 16 threads, decode of 128 tokens after a 64-token prompt. Nothing else runs while timing.
    # prepare / prepare-zipf only synthesize the model (so it can overlap the llama.cpp build);
    # bench reuses /dev/shm/bench.gguf when it was made with the same preset and skew.
    BUDGET=${BUDGET:-12}; NCMOE=${NCMOE:-31}; PRESET=${PRESET:-gpt-oss-120b}
    M=/dev/shm/bench.gguf
    case "$PHASE" in *zipf) SKEW="--router-skew zipf:${ZIPF:-0.7}" ;; *) SKEW="" ;; esac
    if [ "$(cat "$M.key" 2>/dev/null)" != "$PRESET $SKEW" ]; then
        rm -f /dev/shm/*.gguf /dev/shm/*.gguf.key
        log "synth $PRESET $SKEW"
        "$N" synth --arch gpt-oss --preset "$PRESET" $SKEW -o "$M" > /dev/null 2>&1 || { echo "synth failed"; exit 1; }
        echo "$PRESET $SKEW" > "$M.key"
    fi
    case "$PHASE" in prepare*) exit 0 ;; esac
    L=/tmp/llama; LB="$L/b/bin/llama-bench"
    [ -f "$L/building" ] && { log "waiting for the llama.cpp build"; while [ ! -f "$L/built" ]; do sleep 2; done; }
    [ -x "$LB" ] || bash "$0" build-llama "$OUTD"
    [ -x "$LB" ] || { echo "no llama-bench"; exit 1; }
    HOT=""
    if [ "$PHASE" = bench-zipf ]; then
        # The hot set from a profile of other prompts (ids 5000..5255) than the timed one.
        log "profile for the hot set"
        "$N" run -m "$M" --prompt-ids "$(seq -s, 5000 5255)" -n 64 --ignore-eos -t 16 --mode hybrid --vram-budget "$BUDGET" \
            --trace /tmp/profile.nmtr > /dev/null 2> "$OUTD/profile.err" || cat "$OUTD/profile.err"
        "$N" sim /tmp/profile.nmtr --write-hot-set /tmp/hot.json
        "$N" trace info /tmp/profile.nmtr --json > "$OUTD/profile_trace_info.json" 2>&1
        "$N" sim /tmp/profile.nmtr --policy static --capacity 1 --json > "$OUTD/profile_sim.json" 2>&1
        HOT="--hot-set /tmp/hot.json"
    fi
    "$N" bench -m "$M" -p 4 -n 2 -t 16 > "$OUTD/nitro_bench_cpu.txt" 2>&1
    grep -E "bandwidth|GEMV|GB/s" "$OUTD/nitro_bench_cpu.txt" | head -6
    run_nitro() {
        with_mem_peak "$OUTD/mem_nitro_$1.txt" "$N" run -m "$M" --prompt-ids "$PROMPT" -n 128 --ignore-eos -t 16 \
            --vram-budget "$BUDGET" $HOT --json -v > "$OUTD/nitro_$1.json" 2> "$OUTD/nitro_$1.err"
        python3 -c "import json,sys; d=json.load(open('$OUTD/nitro_$1.json')); t=d['timings']; e=d.get('experts',{}); print('nitro  run $1: prompt %.1f tok/s, decode %.2f tok/s, GPU share %.3f, CPU %.1f GB/s' % (t['prompt_tok_s'], t['decode_tok_s'], e.get('gpu_share',0), e.get('cpu_gb_s',0)))"
        grep -E "^experts:" "$OUTD/nitro_$1.err"
    }
    run_llama() {
        with_mem_peak "$OUTD/mem_llama_$1.txt" "$LB" -m "$M" -ngl 99 -ncmoe "$NCMOE" -fa 1 -t 16 -p 64 -n 128 -r 1 -o json \
            > "$OUTD/llama_$1.json" 2> "$OUTD/llama_$1.err" || tail -5 "$OUTD/llama_$1.err"
        python3 -c "
import json; d=json.load(open('$OUTD/llama_$1.json'))
for r in d: print('llama  run $1: %s %.2f tok/s' % ('pp%d' % r['n_prompt'] if r['n_prompt'] else 'tg%d' % r['n_gen'], r['avg_ts']))"
    }
    log "timed runs ($PRESET, budget $BUDGET GiB, llama.cpp -ncmoe $NCMOE)"
    run_nitro 1; run_llama 1; run_llama 2; run_nitro 2
    python3 - "$OUTD" <<'PY'
import json, sys, glob
o = sys.argv[1]
nd = [json.load(open(f"{o}/nitro_{i}.json"))["timings"]["decode_tok_s"] for i in (1, 2)]
lt = []
for i in (1, 2):
    for r in json.load(open(f"{o}/llama_{i}.json")):
        if r["n_gen"]: lt.append(r["avg_ts"])
print("MEASURED decode tok/s: nitro %s, llama.cpp %s; ratio (mean of the mirrored pair) %.3f" % (nd, lt, sum(nd) / sum(lt)))
PY
    ;;
build-llama)
    L=/tmp/llama; mkdir -p "$L"; touch "$L/building"
    log "build llama-bench (CUDA sm_90, native CPU) from llama.cpp 80fb11a"
    # (extracted already when the caller unpacked it first: an extraction racing the tests
    # phase's own once died with SIGBUS on the device)
    [ -f "$L/CMakeLists.txt" ] || tar xJf "$HERE/.carry/llama-src.tar.xz" -C "$L"
    ( cd "$L" && cmake -S . -B b -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
        -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_OPENSSL=OFF > /tmp/llama_cfg.log 2>&1 &&
      cmake --build b -j16 --target llama-bench > /tmp/llama_build.log 2>&1 ) || { echo "llama.cpp build failed"; tail -20 /tmp/llama_build.log; }
    touch "$L/built"; log "llama.cpp build done"
    ;;
*) echo "unknown phase $PHASE"; exit 2 ;;
esac
