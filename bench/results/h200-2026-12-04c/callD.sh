#!/usr/bin/env bash
# device call D (stop 35): the decode attention kernel with its value sum 8 keys at a time. While
# llama-bench builds (call C): CUDA tests. Then, nothing else running: the decode-attention sandbox
# (old vs new), decode at depth 0 / 512 / 4,096 A B B A against llama-bench -d on gpt-oss-20b and
# qwen3-30b-a3b synth; last, ncu kernel durations of a decode step of both engines (qwen3-30b-a3b).
set -uo pipefail
T0=$(date +%s); el() { echo "$(( $(date +%s) - T0 )) s"; }
HERE=$(pwd); W=/tmp/nitro-dev; rm -rf "$W/bin"; mkdir -p "$W"; tar xJf .carry/bin.tar.xz -C "$W"
export LD_LIBRARY_PATH="$W/bin" NITRO_SOURCE_DIR="$HERE"
N="$W/bin/nitro"; B="$W/bin/nitro_cuda_bench"; LB=/tmp/llama/b/bin/llama-bench; R=/tmp/rD; rm -rf "$R"; mkdir -p "$R"
trap 'tar czf "$OUT/rD.tgz" -C /tmp rD' EXIT
{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc; "$N" --version | head -1; } | tee "$R/env.txt"
building() { pgrep -f "cmake --build b" > /dev/null; }
building && echo "llama-bench build running" || { ls -la "$LB" 2>&1; tail -3 /tmp/llama_build.log 2>&1; }
( "$N" synth --arch gpt-oss --preset gpt-oss-20b -o /dev/shm/gpt-oss-20b.gguf > "$R/synth20.log" 2>&1; echo "synth 20b rc=$?"
  "$N" synth --arch qwen3moe --preset qwen3-30b-a3b --type q4_k -o /dev/shm/qwen3-30b-a3b.gguf > "$R/synth30.log" 2>&1; echo "synth 30b rc=$?" ) &
SY=$!
timeout 200 "$W/bin/nitro_cuda_tests" --gtest_color=no --gtest_filter='CudaOps.Attention*:CudaOps.FlashAttention*:CudaModel.Synth*:CudaModel.OpProfile*:CudaBatch.*:CudaQwen3Next.GpuAll*:CudaQwen3Next.Hybrid*:CudaQwen3Next.Truncate*:CudaHybrid.Decode*' > "$R/t.log" 2>&1; echo "tests rc=$? at $(el)"
grep -E "^\[  FAILED|Failure|^\[  PASSED|tests ran" "$R/t.log" | head -30; grep -c "^\[       OK" "$R/t.log"
wait $SY; echo "synth done at $(el)"
while building && [ $(( $(date +%s) - T0 )) -lt 380 ]; do sleep 2; done
tail -1 /tmp/llama_build.log; ls -la "$LB"; echo "build wait over at $(el)"
# --- timed, nothing else running ---
timeout 60 "$W/bin/dev_attention_decode" 10 > "$R/sandbox.txt" 2>&1; echo "sandbox rc=$? at $(el)"
grep -E "FAIL|ALL CHECKS|MEASURED|old/new" "$R/sandbox.txt" | cut -c1-190
nb() { timeout 60 "$B" "/dev/shm/$1.gguf" --no-kernels --depth 512,4096 --reps 3 > "$R/nitro_$1_$2.txt" 2>&1; grep "GPU-all" "$R/nitro_$1_$2.txt" | sed "s/^/[$2] /" | cut -c1-170; }
lb() { [ -x "$LB" ] || return; timeout 60 "$LB" -m "/dev/shm/$1.gguf" -ngl 99 -fa 1 -p 512 -n 128 -d 0,512,4096 -r 2 -o json > "$R/llama_$1_$2.json" 2> /dev/null
  python3 -c "
import json; d=json.load(open('$R/llama_$1_$2.json'))
print('[$2] MEASURED llama $1: ' + ', '.join('%s @ d%d %.1f' % ('pp%d' % r['n_prompt'] if r['n_prompt'] else 'tg%d' % r['n_gen'], r.get('n_depth', -1), r['avg_ts']) for r in d))"; }
for m in gpt-oss-20b qwen3-30b-a3b; do nb $m A; lb $m A; nb $m B; done
echo "side by side done at $(el)"
# --- ncu: kernel durations of decode steps (serialised by the profiler: not a speed figure) ---
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
M=/dev/shm/qwen3-30b-a3b.gguf
timeout 75 "$NCU" --clock-control none --metrics gpu__time_duration.sum --print-units base --csv --page raw --log-file "$R/ncu_nitro.csv" \
    "$N" run -m "$M" --mode gpu --prompt-ids 100 -n 5 --ignore-eos > /dev/null 2>&1; echo "ncu nitro rc=$? at $(el)"
python3 .carry/ncu_sum.py "$R/ncu_nitro.csv" 5 "nitro qwen3-30b-a3b decode (1-token prompt + 4 steps)" 2>&1 | head -30
[ -x "$LB" ] && { timeout 75 "$NCU" --clock-control none --metrics gpu__time_duration.sum --print-units base --csv --page raw --log-file "$R/ncu_llama.csv" \
    "$LB" -m "$M" -ngl 99 -fa 1 -p 0 -n 4 -r 1 > /dev/null 2>&1; echo "ncu llama rc=$? at $(el)"
  python3 .carry/ncu_sum.py "$R/ncu_llama.csv" 5 "llama qwen3-30b-a3b decode (warm-up token + 4)" 2>&1 | head -30; }
echo "end at $(el)"
