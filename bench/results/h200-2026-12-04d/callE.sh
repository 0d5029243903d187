#!/usr/bin/env bash
# device call E (stop 36): call D's state plus the depth classes of decode attention (a KV head's
# whole group a block from 4,096 keys, a decode graph per class), prompt chunks back to whole
# groups, and the f32 router GEMV's block-per-row sums for every token count. The CUDA tests that
# need no fixture file; then, nothing else running: the attention sandbox and nitro's decode at
# depths 512 / 4,096 / 8,192 (no llama-bench in this call: call D has it side by side).
set -uo pipefail
T0=$(date +%s); el() { echo "$(( $(date +%s) - T0 )) s"; }
HERE=$(pwd); W=/tmp/nitro-dev; rm -rf "$W/bin"; mkdir -p "$W"; tar xJf .carry/bin.tar.xz -C "$W"
export LD_LIBRARY_PATH="$W/bin" NITRO_SOURCE_DIR="$HERE"
N="$W/bin/nitro"; B="$W/bin/nitro_cuda_bench"; R=/tmp/rE; rm -rf "$R"; mkdir -p "$R"
trap 'tar czf "$OUT/rE.tgz" -C /tmp rE' EXIT
{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc; "$N" --version | head -1; } | tee "$R/env.txt"
( "$N" synth --arch gpt-oss --preset gpt-oss-20b -o /dev/shm/gpt-oss-20b.gguf > "$R/synth20.log" 2>&1; echo "synth 20b rc=$?"
  "$N" synth --arch qwen3moe --preset qwen3-30b-a3b --type q4_k -o /dev/shm/qwen3-30b-a3b.gguf > "$R/synth30.log" 2>&1; echo "synth 30b rc=$?" ) &
SY=$!
F='CudaOps.*:CudaAttentionSplits.*:CudaModel.Synth*:CudaModel.DecodeGraph*:CudaModel.OpProfile*:CudaBatch.*:CudaQwen3Next.GpuAll*:CudaQwen3Next.Hybrid*:CudaQwen3Next.Truncate*:CudaQwen3Next.Conv*:CudaHybrid.LongPrompts*:CudaHybrid.StagedPrompt*:CudaHybrid.LayerMajor*:CudaHybrid.GroupsServe*'
timeout 270 "$W/bin/nitro_cuda_tests" --gtest_color=no --gtest_filter="$F" > "$R/t.log" 2>&1; echo "tests rc=$? at $(el)"
grep -E "^\[  FAILED|^\[  PASSED|tests ran" "$R/t.log" | head -30; echo "OK: $(grep -c '^\[       OK' "$R/t.log")"
grep -E "Failure|Expected|Which is|evaluates|position|Aborted" "$R/t.log" | head -24
grep -E "qwen3next 13000 tokens gpu-all" "$R/t.log" | cut -c1-200
wait $SY; echo "synth done at $(el)"
# --- timed, nothing else running ---
timeout 60 "$W/bin/dev_attention_decode" 10 > "$R/sandbox.txt" 2>&1; echo "sandbox rc=$? at $(el)"
grep -E "FAIL|ALL CHECKS|old/new" "$R/sandbox.txt" | cut -c1-200
nb() { timeout 60 env $3 "$B" "/dev/shm/$1.gguf" --no-kernels --depth $4 --reps 3 > "$R/nitro_$1_$2.txt" 2>&1
       grep "GPU-all" "$R/nitro_$1_$2.txt" | sed "s/^/[$2] /" | cut -c1-190; }
for m in qwen3-30b-a3b gpt-oss-20b; do nb $m A NITRO_PDL=1 512,4096; nb $m L NITRO_PDL=1 8192; done
echo "end at $(el)"
