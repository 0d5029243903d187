#!/usr/bin/env bash
# qwen3next (Qwen3-Next-80B-A3B / Qwen3-Coder-Next-80B shapes) on the lent GPU machine, one call per
# phase (issue 16; docs/engine.md "qwen3next"):
#   bench/qwen3next_device.sh tests OUT    the CUDA tests (all of them, the CudaQwen3Next ones printed),
#                                          then the three modes on the tiny synth model side by side
#   bench/qwen3next_device.sh prepare OUT  only synthesize the 80B model (/dev/shm, ~44 GiB)
#   bench/qwen3next_device.sh bench OUT    nitro hybrid at a 16 GiB budget vs llama.cpp --cpu-moe and the
#                                          smallest --n-cpu-moe whose plan fits: decode after a 64-token
#                                          prompt, and a 4,096-token prompt
# Inputs as bench/hybrid_device.sh takes them, from .carry/ (git-ignored; made on the development
# machine): bin.tar.xz (bin/{nitro,nitro_cuda_tests} for sm_90 + their shared libraries),
# fixtures.tar.xz (shared/fixtures), llama-src.tar.xz (llama.cpp 80fb11a's source, for llama-bench
# with CUDA: built by `bench/hybrid_device.sh build-llama`).
# Knobs (environment): BUDGET (GiB, 16), EXPERTS (iq4_xs), DENSE (q8_0: real IQ4_XS files keep the
# dense part at 8 bits or so; ASSUMED), THREADS (16), NCMOE (default: the smallest that nitro's plan fits),
# ARCH / PRESET (qwen3next / qwen3-next-80b-a3b; qwen35moe / qwen3.5-35b-a3b for the Qwen3.5/3.6-35B-A3B shape),
# CPUMOE (1; 0 skips llama.cpp --cpu-moe, whose 4,096-token prompt alone took over 110 s on the H200).
set -uo pipefail
PHASE=${1:?phase}; RESULTS=${2:?out dir}
OUTD=/tmp/nitro-out/qn-$PHASE; rm -rf "$OUTD"; mkdir -p "$OUTD"
trap 'tar czf "$RESULTS/qwen3next-$PHASE-logs.tgz" -C "$OUTD" . 2>/dev/null' EXIT
exec 3>&1
HERE=$(cd "$(dirname "$0")/.." && pwd)
W=/tmp/nitro-dev; mkdir -p "$W"
rm -rf "$W/bin"; tar xJf "$HERE/.carry/bin.tar.xz" -C "$W"
export LD_LIBRARY_PATH="$W/bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
N="$W/bin/nitro"
log() { echo "[$(date -u +%H:%M:%S)] $*"; }
gpu_mem() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1; }
with_mem_peak() {
    local f=$1; shift
    ( while :; do gpu_mem >> "$f"; sleep 0.05; done ) & local s=$!
    "$@"; local rc=$?
    kill $s 2>/dev/null; wait $s 2>/dev/null
    echo "peak GPU memory used: $(sort -n "$f" | tail -1) MiB (device total, sampled every 50 ms)" >&3
    return $rc
}
BUDGET=${BUDGET:-16}; EXPERTS=${EXPERTS:-iq4_xs}; DENSE=${DENSE:-q8_0}; T=${THREADS:-16}
ARCH=${ARCH:-qwen3next}; PRESET=${PRESET:-qwen3-next-80b-a3b}
M=/dev/shm/$PRESET.gguf
PROMPT64=$(seq -s, 100 163)
PROMPT4K=$(python3 -c "print(','.join(str(100 + (i * 7919) % 150000) for i in range(4096)))")

prepare() {
    if [ "$(cat "$M.key" 2>/dev/null)" != "$EXPERTS $DENSE" ]; then
        rm -f /dev/shm/*.gguf /dev/shm/*.gguf.key
        log "synth $ARCH:$PRESET, experts $EXPERTS, dense $DENSE"
        "$N" synth --arch "$ARCH" --preset "$PRESET" --type "$EXPERTS" --dense-type "$DENSE" -o "$M" > /dev/null 2>&1 \
            || { echo "synth failed"; exit 1; }
        echo "$EXPERTS $DENSE" > "$M.key"
    fi
    "$N" inspect "$M" > "$OUTD/inspect.txt" 2>&1
}

case "$PHASE" in
tests)
    tar xJf "$HERE/.carry/fixtures.tar.xz" -C "$W"
    export NITRO_SHARED_DIR="$W/shared" NITRO_SOURCE_DIR="$HERE"  # tests/data/qwen3next of this checkout
    { date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc; "$N" --version; } | tee "$OUTD/env.txt"
    log "cuda tests"
    "$W/bin/nitro_cuda_tests" --gtest_color=no > "$OUTD/cuda_tests.log" 2>&1; echo "cuda tests rc=$?"
    grep -E "^\[  (FAILED|PASSED) |FAILED|Failure|gpu-all|hybrid|greedy" "$OUTD/cuda_tests.log" | tail -60
    log "the three modes on the tiny synth model (64-token prompt, 32 greedy tokens)"
    "$N" synth --arch qwen3next --preset tiny -o /tmp/qn-tiny.gguf > /dev/null 2>&1
    for mode in "--mode cpu" "--mode gpu" "--mode hybrid --n-cpu-moe 2"; do
        "$N" run -m /tmp/qn-tiny.gguf --prompt-ids "$PROMPT64" -n 32 --ignore-eos -t "$T" $mode --json > "$OUTD/tiny_$(echo "$mode" | tr -c 'a-z0-9' _).json" 2> "$OUTD/tiny_err.txt" \
            || tail -3 "$OUTD/tiny_err.txt"
    done
    python3 - "$OUTD" <<'PY'
import json, sys, glob
for f in sorted(glob.glob(sys.argv[1] + "/tiny_*.json")):
    d = json.load(open(f))
    print("%-40s %s" % (f.split("/")[-1], d["ids"][:16]))
PY
    ;;
prepare) prepare ;;
bench)
    prepare
    L=/tmp/llama; LB="$L/b/bin/llama-bench"
    [ -x "$LB" ] || bash "$HERE/bench/hybrid_device.sh" build-llama "$OUTD" > "$OUTD/build-llama.txt" 2>&1
    [ -x "$LB" ] || { echo "no llama-bench"; cat "$OUTD/build-llama.txt"; exit 1; }
    # llama.cpp's --n-cpu-moe: the smallest N whose placement nitro's plan fits in the budget (the
    # same dense core and experts; llama.cpp's own buffers differ, so its measured peak is printed).
    if [ -z "${NCMOE:-}" ]; then
        NL=$("$N" inspect "$M" --json | python3 -c "import json,sys; print(json.load(sys.stdin)['hparams']['n_layer'])" 2>/dev/null || echo 48)
        NCMOE=$NL
        for n in $(seq 1 "$NL"); do  # (--n-cpu-moe 0 means "not given" to nitro plan, so it always fits)
            "$N" plan -m "$M" --vram-budget "$BUDGET" --n-cpu-moe "$n" > /dev/null 2>&1 && { NCMOE=$n; break; }
        done
    fi
    "$N" plan -m "$M" --vram-budget "$BUDGET" > "$OUTD/plan.txt" 2>&1; cat "$OUTD/plan.txt"
    "$N" bench -m "$M" -p 4 -n 2 -t "$T" --kernels model > "$OUTD/nitro_bench_cpu.txt" 2>&1
    grep -E "bandwidth|GB/s" "$OUTD/nitro_bench_cpu.txt" | head -6
    run_nitro() {  # $1 tag, $2 prompt ids, $3 tokens to generate
        with_mem_peak "$OUTD/mem_nitro_$1.txt" "$N" run -m "$M" --prompt-ids "$2" -n "$3" --ignore-eos -t "$T" -c 8192 \
            --mode hybrid --vram-budget "$BUDGET" --json -v > "$OUTD/nitro_$1.json" 2> "$OUTD/nitro_$1.err"
        python3 -c "import json; d=json.load(open('$OUTD/nitro_$1.json')); t=d['timings']; e=d.get('experts',{}); print('nitro  $1: prompt %d tok %.1f tok/s, decode %.2f tok/s, GPU share %.3f, CPU %.1f GB/s' % (t['prompt_tokens'], t['prompt_tok_s'], t['decode_tok_s'], e.get('gpu_share',0), e.get('cpu_gb_s',0)))" \
            || tail -5 "$OUTD/nitro_$1.err"
        grep -E "^experts:" "$OUTD/nitro_$1.err"
    }
    run_llama() {  # $1 tag, $2 llama-bench offload flags
        with_mem_peak "$OUTD/mem_llama_$1.txt" "$LB" -m "$M" -ngl 99 $2 -fa 1 -t "$T" -p 64,4096 -n 128 -r 1 -o json \
            > "$OUTD/llama_$1.json" 2> "$OUTD/llama_$1.err" || tail -5 "$OUTD/llama_$1.err"
        python3 -c "
import json; d=json.load(open('$OUTD/llama_$1.json'))
for r in d: print('llama  $1: %s %.2f tok/s' % ('pp%d' % r['n_prompt'] if r['n_prompt'] else 'tg%d' % r['n_gen'], r['avg_ts']))"
    }
    log "timed runs (budget $BUDGET GiB; llama.cpp --cpu-moe and -ncmoe $NCMOE), mirrored"
    run_nitro dec1 "$PROMPT64" 128; run_nitro pp1 "$PROMPT4K" 1
    # llama-bench has no --cpu-moe: -ncmoe with every layer is the same placement
    NLAYERS=$("$N" inspect "$M" --json | python3 -c "import json,sys; print(json.load(sys.stdin)['hparams']['n_layer'])" 2>/dev/null || echo 48)
    [ "${CPUMOE:-1}" = 1 ] && run_llama cpumoe1 "-ncmoe $NLAYERS"
    run_llama ncmoe1 "-ncmoe $NCMOE"; run_llama ncmoe2 "-ncmoe $NCMOE"
    [ "${CPUMOE:-1}" = 1 ] && run_llama cpumoe2 "-ncmoe $NLAYERS"
    run_nitro pp2 "$PROMPT4K" 1; run_nitro dec2 "$PROMPT64" 128
    python3 - "$OUTD" "$NCMOE" <<'PY'
import json, sys
o, ncmoe = sys.argv[1], sys.argv[2]
def nitro(tag, key): return [json.load(open(f"{o}/nitro_{tag}{i}.json"))["timings"][key] for i in (1, 2)]
def llama(tag, prompt):
    out = []
    for i in (1, 2):
        try:
            rows = json.load(open(f"{o}/llama_{tag}{i}.json"))
        except (OSError, ValueError):
            continue  # not run (CPUMOE=0) or no result
        for r in rows:
            if prompt and r["n_prompt"] == 4096: out.append(r["avg_ts"])
            if not prompt and r["n_gen"]: out.append(r["avg_ts"])
    return out
mean = lambda v: sum(v) / len(v)
nd, npp = nitro("dec", "decode_tok_s"), nitro("pp", "prompt_tok_s")
print("MEASURED (mean of the mirrored pair):")
print("| | decode tok/s (tg128) | prompt tok/s (pp4096) |")
print("|---|---:|---:|")
print("| nitro hybrid | %.2f | %.1f |" % (mean(nd), mean(npp)))
for tag, name in (("cpumoe", "llama.cpp --cpu-moe"), ("ncmoe", "llama.cpp -ncmoe " + ncmoe)):
    if not llama(tag, False): continue
    print("| %s | %.2f | %.1f |" % (name, mean(llama(tag, False)), mean(llama(tag, True))))
PY
    ;;
*) echo "unknown phase $PHASE"; exit 2 ;;
esac
