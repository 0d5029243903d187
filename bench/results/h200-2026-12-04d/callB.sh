#!/usr/bin/env bash
# device call B (stop 36): PDL in the decode graph, the small-depth attention changes, the 4-block
# RMSNorm, the register-only router, the dense GEMV rounding its input. While llama-bench builds
# (call A): every CUDA test, then ncu kernel durations of nitro's decode step (PDL off: ncu
# serialises kernels anyway). Then, nothing else running: the attention sandbox (checks, the
# small-depth sweep, old vs new), and decode side by side: nitro PDL on, llama-bench, nitro PDL off.
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
timeout 230 "$W/bin/nitro_cuda_tests" --gtest_color=no > "$R/t.log" 2>&1; echo "tests rc=$? at $(el)"
grep -E "^\[  FAILED|^\[  PASSED|tests ran" "$R/t.log" | head -30; grep -c "^\[       OK" "$R/t.log"
grep -B3 "^\[  FAILED  \]" "$R/t.log" | grep -v "cannot open" | grep -E "Failure|Expected|Which is|error" | head -20
wait $SY; echo "synth done at $(el)"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
M=/dev/shm/qwen3-30b-a3b.gguf
NITRO_PDL=0 timeout 90 "$NCU" --clock-control none --cache-control none -k 'regex:^(?!.*wait_flag)' --metrics gpu__time_duration.sum \
    --print-units base --csv --page raw --log-file "$R/ncu_nitro.csv" \
    "$N" run -m "$M" --mode gpu --prompt-ids 100 -n 3 --ignore-eos > "$R/ncu_run.log" 2>&1; echo "ncu nitro rc=$? at $(el)"
python3 .carry/ncu_sum.py "$R/ncu_nitro.csv" 1 "nitro qwen3-30b-a3b decode (last step)" -1 2>&1 | head -34
while building && [ $(( $(date +%s) - T0 )) -lt 375 ]; do sleep 2; done
tail -1 /tmp/llama_build.log; ls -la "$LB"; echo "build wait over at $(el)"
# --- timed, nothing else running ---
timeout 60 "$W/bin/dev_attention_decode" 10 > "$R/sandbox.txt" 2>&1; echo "sandbox rc=$? at $(el)"
grep -E "FAIL|ALL CHECKS|MEASURED|old/new|\| hpb" "$R/sandbox.txt" | cut -c1-200
nb() { timeout 50 env $3 "$B" "/dev/shm/$1.gguf" --no-kernels --depth 512,4096 --reps 3 > "$R/nitro_$1_$2.txt" 2>&1
       grep "GPU-all\|programmatic" "$R/nitro_$1_$2.txt" | sed "s/^/[$2] /" | cut -c1-170; }
lb() { [ -x "$LB" ] || return; timeout 60 "$LB" -m "/dev/shm/$1.gguf" -ngl 99 -fa 1 -p 512 -n 128 -d 0,512,4096 -r 2 -o json > "$R/llama_$1_$2.json" 2> /dev/null
  python3 -c "
import json; d=json.load(open('$R/llama_$1_$2.json'))
print('[$2] MEASURED llama $1: ' + ', '.join('%s @ d%d %.1f' % ('pp%d' % r['n_prompt'] if r['n_prompt'] else 'tg%d' % r['n_gen'], r.get('n_depth', -1), r['avg_ts']) for r in d))"; }
for m in qwen3-30b-a3b gpt-oss-20b; do nb $m A NITRO_PDL=1; lb $m A; nb $m B NITRO_PDL=0; done
echo "side by side done at $(el)"
[ $(( $(date +%s) - T0 )) -lt 545 ] && { timeout 40 "$B" /dev/shm/qwen3-30b-a3b.gguf --no-kernels --pp 16 --tg 64 --reps 1 --ops > "$R/ops_qwen3.txt" 2>&1
  grep -A12 "by op" "$R/ops_qwen3.txt" | cut -c1-170; }
echo "end at $(el)"
