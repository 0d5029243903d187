#!/usr/bin/env bash
# device call D (stop 36): the committed state (call B's changes plus 1 query head a block in decode
# attention at head_dim 128, 2 at 64, one split per 128 keys, and the router product with its top-k
# in one launch). While llama-bench builds (call C, = call A): the CUDA tests that need no fixture
# file (../shared/fixtures does not fit in a call beside the binaries). Then, nothing else running:
# the attention sandbox, decode side by side (nitro PDL on, llama-bench, nitro PDL off), and the
# decode step by op (--ops) of qwen3-30b-a3b.
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
NOFX='-*Fixture*:CudaAdaptive.GptOss*:CudaAdaptive.Qwen3Moe*:CudaAdaptive.Frozen*:CudaAdaptive.Faults*:CudaHybrid.BitIdentical*:CudaHybrid.ModesAndBudgetErrors:CudaRouteReplay.*'
timeout 300 "$W/bin/nitro_cuda_tests" --gtest_color=no --gtest_filter="$NOFX" > "$R/t.log" 2>&1; echo "tests rc=$? at $(el)"
grep -E "^\[  FAILED|^\[  PASSED|tests ran" "$R/t.log" | head -30; echo "OK: $(grep -c '^\[       OK' "$R/t.log")"
grep -E "Failure|Expected|Which is|error|Aborted" "$R/t.log" | head -20
wait $SY; echo "synth done at $(el)"
while building && [ $(( $(date +%s) - T0 )) -lt 390 ]; do sleep 2; done
tail -1 /tmp/llama_build.log; ls -la "$LB"; echo "build wait over at $(el)"
# --- timed, nothing else running ---
timeout 60 "$W/bin/dev_attention_decode" 10 > "$R/sandbox.txt" 2>&1; echo "sandbox rc=$? at $(el)"
grep -E "FAIL|ALL CHECKS|MEASURED|old/new" "$R/sandbox.txt" | cut -c1-200
nb() { timeout 50 env $3 "$B" "/dev/shm/$1.gguf" --no-kernels --depth 512,4096 --reps 3 > "$R/nitro_$1_$2.txt" 2>&1
       grep "GPU-all" "$R/nitro_$1_$2.txt" | sed "s/^/[$2] /" | cut -c1-190; }
lb() { [ -x "$LB" ] || return; timeout 60 "$LB" -m "/dev/shm/$1.gguf" -ngl 99 -fa 1 -p 512 -n 128 -d 0,512,4096 -r 2 -o json > "$R/llama_$1_$2.json" 2> /dev/null
  python3 -c "
import json; d=json.load(open('$R/llama_$1_$2.json'))
print('[$2] MEASURED llama $1: ' + ', '.join('%s @ d%d %.1f' % ('pp%d' % r['n_prompt'] if r['n_prompt'] else 'tg%d' % r['n_gen'], r.get('n_depth', -1), r['avg_ts']) for r in d))"; }
for m in qwen3-30b-a3b gpt-oss-20b; do nb $m A NITRO_PDL=1; lb $m A; nb $m B NITRO_PDL=0; done
echo "side by side done at $(el)"
timeout 40 "$B" /dev/shm/qwen3-30b-a3b.gguf --no-kernels --pp 16 --tg 64 --reps 1 --ops > "$R/ops_qwen3.txt" 2>&1
grep -A14 "by op" "$R/ops_qwen3.txt" | cut -c1-170
echo "end at $(el)"
