#!/usr/bin/env bash
# Adaptive residency (issue 13) on the lent GPU machine in ONE call (docs/hybrid.md, "Adaptive
# residency: benchmark"): the CUDA tests, then gpt-oss-120b synth at a 12 GiB budget, 16 threads,
# side by side and mirrored:
#   uniform routing (the synth file's own):  adaptive, frozen, llama.cpp, llama.cpp, frozen, adaptive
#   replay of a trained routing trace (REPLAY, topics move every 256 decode tokens; hot set from
#   other prompts of the same model): adaptive, frozen, frozen, adaptive
# llama.cpp (80fb11a, -ngl 99 -ncmoe 31 -fa 1, built here while the tests run) reads the same bytes
# whatever the routing, so its uniform figure is the baseline of both.
#   bench/adaptive_device.sh OUT
# Carried (.carry/, bench/make_carry.sh --llama): bin.tar.xz, fixtures.tar.xz, llama-src.tar.xz;
# REPLAY (default .carry/t120b.nmtr) and HOT (default .carry/hot120.json).
# Nothing is timed while the build or the tests run.
set -uo pipefail
OUT=${1:?out dir}
HERE=$(cd "$(dirname "$0")/.." && pwd)
T0=$(date +%s)
W=/tmp/nitro-adapt; rm -rf "$W"; mkdir -p "$W/log" "$W/models"
log() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
for f in bin fixtures; do tar xJf "$HERE/.carry/$f.tar.xz" -C "$W"; done
ln -sf "$HERE/models/tiny-moe-pystd.gguf" "$W/models/"
export LD_LIBRARY_PATH="$W/bin" NITRO_SHARED_DIR="$W/shared"
N="$W/bin/nitro"; M=/dev/shm/g120.gguf; L=/tmp/llama; LB=$L/b/bin/llama-bench
REPLAY=${REPLAY:-$HERE/.carry/t120b.nmtr}; HOT=${HOT:-$HERE/.carry/hot120.json}
BUDGET=${BUDGET:-12}; NCMOE=${NCMOE:-31}; NGEN=${NGEN:-128}; RGEN=${RGEN:-512}
{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc; "$N" --version; } > "$W/log/env.txt" 2>&1

# 1. in the background: the llama.cpp build and the synth model (CPU only)
( mkdir -p $L && tar xJf "$HERE/.carry/llama-src.tar.xz" -C $L && cd $L &&
  cmake -S . -B b -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
        -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_OPENSSL=OFF > "$W/log/llama_cfg.log" 2>&1 &&
  cmake --build b -j12 --target llama-bench > "$W/log/llama_build.log" 2>&1 ) &
LLAMA=$!
( "$N" synth --arch gpt-oss --preset gpt-oss-120b -o $M > "$W/log/synth.log" 2>&1 ) &
SYN=$!
# 2. the CUDA tests (correctness, alone on the GPU) and a memcheck of a run with admissions
log "cuda tests"
"$W/bin/nitro_cuda_tests" --gtest_color=no > "$W/log/cuda_tests.log" 2>&1; echo "cuda tests rc=$?" | tee -a "$W/log/cuda_tests.log"
grep -E "^\[  (FAILED|PASSED) |^\[  FAILED|^  tiny|^  live|^  no staging|^  one staging|^  every" "$W/log/cuda_tests.log" | head -40
log "compute-sanitizer memcheck (adaptive, embedded model)"
timeout 150 compute-sanitizer --tool memcheck --leak-check no "$W/bin/nitro_cuda_tests" --gtest_color=no \
    --gtest_filter=CudaAdaptive.LiveEqualsSimulatedOnTheEmbeddedModel > "$W/log/memcheck.log" 2>&1
echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' "$W/log/memcheck.log" | tail -1)"
wait $SYN; log "synth done: $(tail -1 "$W/log/synth.log")"
wait $LLAMA; [ -x $LB ] && log "llama-bench built" || { log "llama.cpp build failed"; tail -5 "$W/log/llama_build.log"; }

# 3. timed, nothing else running
PROMPT=$(seq -s, 100 163)
run_nitro() {  # name, extra args...
    local name=$1; shift
    timeout 150 "$N" run -m $M --ignore-eos -t 16 --vram-budget "$BUDGET" --json -v "$@" \
        > "$W/log/nitro_$name.json" 2> "$W/log/nitro_$name.err"
    python3 - "$W/log/nitro_$name.json" "$name" <<'PY'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception as e:
    print(f"nitro {sys.argv[2]}: no result ({e})"); sys.exit()
t, e = d["timings"], d.get("experts", {})
c = e.get("cache", {})
print(f"nitro {sys.argv[2]:12s} decode {t['decode_tok_s']:7.2f} tok/s  prompt {t['prompt_tok_s']:7.1f} tok/s  GPU share {e.get('gpu_share',0):.3f}  "
      f"hit {c.get('hit_rate',0):.3f}  adm {c.get('admissions',0)}  late {c.get('late_copies',0)}  failed {c.get('failed_copies',0)}  "
      f"H2D {c.get('h2d_bytes',0)/1e6/max(1,t['generated_tokens']+t['prompt_tokens']):.1f} MB/tok  CPU {e.get('cpu_gb_s',0):.1f} GB/s")
PY
}
run_llama() {
    timeout 150 $LB -m $M -ngl 99 -ncmoe "$NCMOE" -fa 1 -t 16 -p 64 -n "$NGEN" -r 1 -o json > "$W/log/llama_$1.json" 2> "$W/log/llama_$1.err"
    python3 -c "
import json
for r in json.load(open('$W/log/llama_$1.json')): print('llama $1 %s %.2f tok/s' % ('pp%d' % r['n_prompt'] if r['n_prompt'] else 'tg%d' % r['n_gen'], r['avg_ts']))" 2>&1 | tail -2
}
log "uniform: adaptive, frozen, llama.cpp, llama.cpp, frozen, adaptive"
U="--prompt-ids $PROMPT -n $NGEN"
run_nitro ua1 $U; run_nitro uf1 $U --refresh-every 0
[ -x $LB ] && { run_llama 1; run_llama 2; }
run_nitro uf2 $U --refresh-every 0; run_nitro ua2 $U
if [ -f "$REPLAY" ] && [ $(( $(date +%s) - T0 )) -lt 440 ]; then
    log "replay of $(basename "$REPLAY") (hot set $(basename "$HOT")): adaptive, frozen, frozen, adaptive"
    RP=$(seq -s, 200 455)  # 256 prompt tokens: the trace's first prompt chunk
    R="--route-replay $REPLAY --hot-set $HOT"
    run_nitro ra1 --prompt-ids "$RP" -n "$RGEN" $R; run_nitro rf1 --prompt-ids "$RP" -n "$RGEN" $R --refresh-every 0
    run_nitro rf2 --prompt-ids "$RP" -n "$RGEN" $R --refresh-every 0; run_nitro ra2 --prompt-ids "$RP" -n "$RGEN" $R
fi
grep -h "^expert cache\|^experts:" "$W"/log/nitro_*.err | head -4
log "done"
tar czf "$OUT/adaptive-logs.tgz" -C "$W" log
