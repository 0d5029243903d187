#!/usr/bin/env bash
# device call B (stop 35): the new decode attention kernel. While llama-bench builds (call A) and the
# synth models are written: CUDA tests (attention ops, models GPU vs CPU, batches, qwen3next,
# hybrid prompt paths). Then, nothing else running: the decode-attention sandbox (old vs new
# kernel), and decode at depth 0 / 512 / 4,096 side by side, A B B A: nitro_cuda_bench --depth
# against llama-bench -d, on gpt-oss-20b and qwen3-30b-a3b synth; `nitro run` at 512 + 128 tokens
# (call 6 measured 194 / 118 tok/s there with the former kernel).
set -uo pipefail
T0=$(date +%s); el() { echo "$(( $(date +%s) - T0 )) s"; }
HERE=$(pwd); W=/tmp/nitro-dev; rm -rf "$W/bin"; mkdir -p "$W"; tar xJf .carry/bin.tar.xz -C "$W"
export LD_LIBRARY_PATH="$W/bin" NITRO_SOURCE_DIR="$HERE"
N="$W/bin/nitro"; B="$W/bin/nitro_cuda_bench"; LB=/tmp/llama/b/bin/llama-bench; R=/tmp/rB; rm -rf "$R"; mkdir -p "$R"
trap 'tar czf "$OUT/rB.tgz" -C /tmp rB' EXIT
{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc; "$N" --version | head -1; } | tee "$R/env.txt"
building() { pgrep -f "cmake --build b" > /dev/null; }
building && echo "llama-bench build running" || { ls -la "$LB" 2>&1; tail -3 /tmp/llama_build.log 2>&1; }
( "$N" synth --arch gpt-oss --preset gpt-oss-20b -o /dev/shm/gpt-oss-20b.gguf > "$R/synth20.log" 2>&1; echo "synth 20b rc=$?"
  "$N" synth --arch qwen3moe --preset qwen3-30b-a3b --type q4_k -o /dev/shm/qwen3-30b-a3b.gguf > "$R/synth30.log" 2>&1; echo "synth 30b rc=$?" ) &
SY=$!
timeout 240 "$W/bin/nitro_cuda_tests" --gtest_color=no --gtest_filter='CudaOps.Attention*:CudaOps.FlashAttention*:CudaModel.*:CudaBatch.*:CudaQwen3Next.*:CudaHybrid.PromptPathsMatchCpu:CudaHybrid.Decode*' > "$R/t.log" 2>&1; echo "tests rc=$? at $(el)"
grep -E "^\[  FAILED|Failure|^\[  PASSED|tests ran" "$R/t.log" | head -30; grep -c "^\[       OK" "$R/t.log"
wait $SY; echo "synth done at $(el)"
while building && [ $(( $(date +%s) - T0 )) -lt 400 ]; do sleep 2; done
tail -1 /tmp/llama_build.log; ls -la "$LB"; echo "build wait over at $(el)"
# --- timed, nothing else running ---
timeout 90 "$W/bin/dev_attention_decode" 10 > "$R/sandbox.txt" 2>&1; echo "sandbox rc=$? at $(el)"
grep -E "FAIL|ALL CHECKS|MEASURED|old/new" "$R/sandbox.txt" | cut -c1-190
P512=$(python3 -c "print(','.join(str(100 + (i * 7919) % 150000) for i in range(512)))")
nb() { timeout 100 "$B" "/dev/shm/$1.gguf" --no-kernels --depth 512,4096 --reps 3 > "$R/nitro_$1_$2.txt" 2>&1; grep MEASURED "$R/nitro_$1_$2.txt" | sed "s/^/[$2] /" | cut -c1-170; }
lb() { [ -x "$LB" ] || return; timeout 100 "$LB" -m "/dev/shm/$1.gguf" -ngl 99 -fa 1 -p 512 -n 128 -d 0,512,4096 -r 2 -o json > "$R/llama_$1_$2.json" 2> /dev/null
  python3 -c "
import json; d=json.load(open('$R/llama_$1_$2.json'))
print('[$2] MEASURED llama $1: ' + ', '.join('%s @ d%d %.1f' % ('pp%d' % r['n_prompt'] if r['n_prompt'] else 'tg%d' % r['n_gen'], r.get('n_depth', -1), r['avg_ts']) for r in d))"; }
nr() { timeout 60 "$N" run -m "/dev/shm/$1.gguf" --mode gpu --prompt-ids "$P512" -n 128 --ignore-eos -c 1024 --json > "$R/run_$1.json" 2> /dev/null
  python3 -c "import json; t=json.load(open('$R/run_$1.json'))['timings']; print('MEASURED nitro run $1 GPU-all (-c 1024, 512-token prompt): pp512 %.1f tok/s, tg128 %.1f tok/s' % (t['prompt_tok_s'], t['decode_tok_s']))"; }
for m in gpt-oss-20b qwen3-30b-a3b; do nb $m A; lb $m A; lb $m B; nb $m B; nr $m; done
echo "side by side done at $(el)"
timeout 60 "$B" /dev/shm/qwen3-30b-a3b.gguf --no-kernels --depth 4096 --reps 1 --ops > "$R/ops_q30_d4096.txt" 2>&1
sed -n '/decode step by op/,$p' "$R/ops_q30_d4096.txt" | head -20
echo "end at $(el)"
