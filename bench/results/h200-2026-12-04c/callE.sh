#!/usr/bin/env bash
# device call E (stop 35): the decode attention kernel with its splits merged by the last block (one
# launch per layer, not two). CUDA tests; the decode-attention sandbox; then, nothing else running:
# nitro_cuda_bench decode at depth 0 / 512 / 4,096 (A B) and `nitro run` at 512 + 128 tokens on
# gpt-oss-20b and qwen3-30b-a3b synth (llama.cpp's figures: call D, same session); last, ncu kernel
# durations of nitro's decode steps on qwen3-30b-a3b (application replay: the graph's last kernel
# writes host-mapped memory, which kernel replay cannot restore).
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
timeout 200 "$W/bin/nitro_cuda_tests" --gtest_color=no --gtest_filter='CudaOps.Attention*:CudaOps.FlashAttention*:CudaModel.Synth*:CudaModel.OpProfile*:CudaBatch.*:CudaQwen3Next.GpuAll*:CudaQwen3Next.Hybrid*:CudaQwen3Next.Truncate*:CudaHybrid.Decode*:CudaHybrid.PromptPathsMatchCpu' > "$R/t.log" 2>&1; echo "tests rc=$? at $(el)"
grep -E "^\[  FAILED|Failure|^\[  PASSED|tests ran" "$R/t.log" | head -30; grep -c "^\[       OK" "$R/t.log"
wait $SY; echo "synth done at $(el)"
# --- timed, nothing else running ---
timeout 60 "$W/bin/dev_attention_decode" 10 > "$R/sandbox.txt" 2>&1; echo "sandbox rc=$? at $(el)"
grep -E "FAIL|ALL CHECKS|MEASURED|old/new" "$R/sandbox.txt" | cut -c1-190
P512=$(python3 -c "print(','.join(str(100 + (i * 7919) % 150000) for i in range(512)))")
nb() { timeout 60 "$B" "/dev/shm/$1.gguf" --no-kernels --depth 512,4096 --reps 3 > "$R/nitro_$1_$2.txt" 2>&1; grep "GPU-all" "$R/nitro_$1_$2.txt" | sed "s/^/[$2] /" | cut -c1-170; }
nr() { timeout 60 "$N" run -m "/dev/shm/$1.gguf" --mode gpu --prompt-ids "$P512" -n 128 --ignore-eos -c 1024 --json > "$R/run_$1.json" 2> /dev/null
  python3 -c "import json; t=json.load(open('$R/run_$1.json'))['timings']; print('MEASURED nitro run $1 GPU-all (-c 1024, 512-token prompt): pp512 %.1f tok/s, tg128 %.1f tok/s' % (t['prompt_tok_s'], t['decode_tok_s']))"; }
for m in gpt-oss-20b qwen3-30b-a3b; do nb $m A; nr $m; nb $m B; done
echo "side by side done at $(el)"
timeout 40 "$B" /dev/shm/qwen3-30b-a3b.gguf --no-kernels --depth 4096 --reps 1 --ops > "$R/ops_q30_d4096.txt" 2>&1
sed -n '/decode step by op/,$p' "$R/ops_q30_d4096.txt" | head -14
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
timeout 120 "$NCU" --clock-control none --replay-mode application --metrics gpu__time_duration.sum --print-units base --csv --page raw \
    --log-file "$R/ncu_nitro.csv" "$N" run -m /dev/shm/qwen3-30b-a3b.gguf --mode gpu --prompt-ids 100 -n 5 --ignore-eos > /dev/null 2>&1
echo "ncu nitro rc=$? at $(el)"
python3 .carry/ncu_sum.py "$R/ncu_nitro.csv" 4 "nitro qwen3-30b-a3b decode (the last 4 steps)" 2704 2>&1 | head -30
echo "end at $(el)"
