#!/usr/bin/env bash
# The benchmark report of docs/bench.md on the lent GPU machine: `nitro bench -o DIR` on a synth
# gpt-oss-20b (in /dev/shm) for the modes cpu, gpu and hybrid (two budgets), each step mirrored
# A B B A against llama.cpp's llama-bench on the same file (bench/llama_bench_peer.sh). Phases,
# one device call each (each well under 10 minutes; the machine keeps /dev/shm and /tmp between
# calls while it stays warm):
#   bench/report_device.sh pack              (here, on the development machine) makes the carried
#                                            inputs .carry/bin.tar.xz and .carry/llama-src.tar.xz
#   bench/report_device.sh prepare OUT       builds llama-bench (CUDA sm_90, ~5 min on 16 cores)
#                                            while nitro synthesizes gpt-oss-20b into /dev/shm
#   bench/report_device.sh cpu|gpu|hybrid OUT  one part of the sweep, appended to
#                                            /tmp/nitro-report/records.jsonl (nitro bench --append);
#                                            OUT gets the records and the report so far
#   bench/report_device.sh all OUT           prepare, cpu, gpu and hybrid in one call (~20 min: only
#                                            where a call may take that long)
# Time per call, ESTIMATED from shared/PEERS.md's rates (16 threads, A B B A): prepare ~6 min (the
# llama.cpp build), cpu ~4 min (prefill at ~90 tok/s on both sides dominates), gpu ~3 min, hybrid
# ~5 min (nitro bench's progress bar is left out of the log).
# If the machine was given back between calls, /tmp/nitro-report starts empty: each call's OUT has
# its records.jsonl, so concatenate them and `nitro bench -m X -o DIR --render-only` for one report.
# Settings (environment): THREADS (16), REPEAT (2: A B B A), N_GEN (32), CPU_CTX (512,2k),
# GPU_CTX (4k,16k,32k), HYBRID_CTX (4k,8k), BUDGETS (6,10 GiB), ROUTING (file; e.g.
# file,replay:bench/traces/gpt-oss-20b.nmtr once the trained traces are committed).
# Carried (git-ignored .carry/, made by the pack phase):
#   bin.tar.xz        bin/nitro built for sm_90 (build-cuda) + the Debian shared libraries it needs
#   llama-src.tar.xz  llama.cpp 80fb11a's source (node-llama-cpp's bundle, git archive)
set -uo pipefail
PHASE=${1:?phase: pack, prepare, cpu, gpu, hybrid or all}
HERE=$(cd "$(dirname "$0")/.." && pwd)
THREADS=${THREADS:-16} REPEAT=${REPEAT:-2} N_GEN=${N_GEN:-32}
CPU_CTX=${CPU_CTX:-512,2k} GPU_CTX=${GPU_CTX:-4k,16k,32k} HYBRID_CTX=${HYBRID_CTX:-4k,8k} BUDGETS=${BUDGETS:-6,10}
ROUTING=${ROUTING:-file}
W=/tmp/nitro-dev L=/tmp/llama M=/dev/shm/g20.gguf R=/tmp/nitro-report
LB=$L/b/bin/llama-bench
log() { echo "[$(date -u +%H:%M:%S)] $*"; }

if [ "$PHASE" = pack ]; then
    # On the development machine: the CUDA build's binaries with their non-system libraries, and the
    # llama.cpp source of the peer trimmed to what llama-bench builds (bench/make_carry.sh).
    exec bash "$HERE/bench/make_carry.sh" --llama "${BUILD_CUDA:-$HERE/build-cuda}"
fi

OUT=${2:?out dir}
mkdir -p "$W" "$R"
exec > >(tee -a "$OUT/report-device.log") 2>&1
rm -rf "$W/bin"; tar xJf "$HERE/.carry/bin.tar.xz" -C "$W"  # always this call's binary (other scripts share $W)
export LD_LIBRARY_PATH="$W/bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
N="$W/bin/nitro"

prepare() {
    { date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc; "$N" --version; } 2>&1
    if [ ! -x "$LB" ]; then
        log "build llama-bench (CUDA sm_90) from llama.cpp 80fb11a, in the background"
        mkdir -p "$L"
        ( [ -f "$L/CMakeLists.txt" ] || tar xJf "$HERE/.carry/llama-src.tar.xz" -C "$L"
          cd "$L" && cmake -S . -B b -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
              -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_OPENSSL=OFF > /tmp/llama_cfg.log 2>&1 &&
          cmake --build b -j16 --target llama-bench > /tmp/llama_build.log 2>&1 ) &
        BUILD=$!
    fi
    if [ ! -f "$M" ]; then
        log "synth gpt-oss-20b -> $M"
        "$N" synth --arch gpt-oss --preset gpt-oss-20b -o "$M" > /tmp/synth.log 2>&1 || { tail -5 /tmp/synth.log; exit 1; }
    fi
    if [ -n "${BUILD:-}" ]; then
        wait "$BUILD" || { echo "llama.cpp build failed"; tail -20 /tmp/llama_build.log; exit 1; }
    fi
    [ -x "$LB" ] || { echo "no llama-bench"; exit 1; }
    log "prepared: $M, $LB"
}

# One part of the sweep: nitro bench appends its runs to $R/records.jsonl and writes the report of
# every record so far; OUT gets a copy after each part.
sweep() {
    local modes=$1 ctx=$2; shift 2
    [ -f "$M" ] && [ -x "$LB" ] || prepare
    log "nitro bench --modes $modes --ctx $ctx $*"
    "$N" bench -m "$M" -o "$R" --append --modes "$modes" --ctx "$ctx" "$@" -n "$N_GEN" -t "$THREADS" --repeat "$REPEAT" \
        --routing "$ROUTING" --peer-timeout 300 \
        --peer-cmd "bash $HERE/bench/llama_bench_peer.sh $LB $N {model} {ctx} {n_gen} {threads} {mode} {budget}" \
        2> >(tr '\r' '\n' | grep -v '^\[[#.]*\] ' >&2)
    echo "nitro bench exit status $?"
    cp "$R"/records.jsonl "$R"/report.md "$R"/report-*.svg "$OUT/" 2>/dev/null
    ls "$OUT"
}

case "$PHASE" in
prepare) prepare ;;
cpu) sweep cpu "$CPU_CTX" ;;
gpu) sweep gpu "$GPU_CTX" ;;
hybrid) sweep hybrid "$HYBRID_CTX" --vram-budget "$BUDGETS" ;;
all) prepare; sweep cpu "$CPU_CTX"; sweep gpu "$GPU_CTX"; sweep hybrid "$HYBRID_CTX" --vram-budget "$BUDGETS" ;;
*) echo "unknown phase $PHASE"; exit 2 ;;
esac
