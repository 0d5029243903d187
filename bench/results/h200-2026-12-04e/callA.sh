#!/usr/bin/env bash
# device call A (stop 37): Q4_K / Q5_K chunk pairs in the integer decode kernels (mmvq_pairs).
# The CUDA tests of the decode products and the decode MoE, then, nothing else running: the kernel
# figures (GEMV per type with pairs on / off, the decode MoE at gpt-oss's and qwen3's expert shapes)
# and qwen3-30b-a3b GPU-all with pairs on / off, A B A B.
set -uo pipefail
T0=$(date +%s); el() { echo "$(( $(date +%s) - T0 )) s"; }
HERE=$(pwd); W=/tmp/nitro-dev; rm -rf "$W/bin"; mkdir -p "$W"; tar xJf .carry/bin.tar.xz -C "$W"
export LD_LIBRARY_PATH="$W/bin" NITRO_SOURCE_DIR="$HERE"
N="$W/bin/nitro"; B="$W/bin/nitro_cuda_bench"; R=/tmp/rA; rm -rf "$R"; mkdir -p "$R"
trap 'tar czf "$OUT/rA.tgz" -C /tmp rA' EXIT
{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc; "$N" --version | head -1; } | tee "$R/env.txt"
( "$N" synth --arch qwen3moe --preset qwen3-30b-a3b --type q4_k -o /dev/shm/qwen3-30b-a3b.gguf > "$R/synth30.log" 2>&1; echo "synth 30b rc=$?" ) &
SY=$!
F='Q8DotHost.*:CudaOps.Mmvq*:CudaOps.MatmulGemv*:CudaOps.QuantizeQ8*:CudaOps.MoeThroughSlotTable*:CudaOps.FusedDecode*:CudaModel.SynthModels*:CudaModel.DecodeGraph*:CudaBatch.*'
timeout 260 "$W/bin/nitro_cuda_tests" --gtest_color=no --gtest_filter="$F" > "$R/t.log" 2>&1; echo "tests rc=$? at $(el)"
grep -E "^\[  FAILED|^\[  PASSED|tests ran|^\[       OK" "$R/t.log" | head -40
grep -E "Failure|Expected|Which is|error|Aborted|worst" "$R/t.log" | head -20
wait $SY; echo "synth done at $(el)"
# --- timed, nothing else running ---
timeout 120 "$B" /dev/shm/qwen3-30b-a3b.gguf --pp 0 > "$R/kernels.txt" 2>&1; echo "kernels rc=$? at $(el)"
grep -E "copy|Q4_K|Q5_K|MXFP4|Q8_0|Q6_K|IQ4_XS|F16 |token|decode MoE" "$R/kernels.txt" | head -30 | cut -c1-220
nb() { timeout 50 env NITRO_MMVQ_PAIRS=$2 "$B" /dev/shm/qwen3-30b-a3b.gguf --no-kernels --depth 512 --reps 3 > "$R/nitro_q30_p$2_$1.txt" 2>&1
       grep "GPU-all" "$R/nitro_q30_p$2_$1.txt" | sed "s/^/[pairs=$2 $1] /" | cut -c1-200; }
nb 1 1; nb 1 0; nb 2 1; nb 2 0
echo "end at $(el)"
