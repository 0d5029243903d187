#!/usr/bin/env bash
# device call D (stop 37): the state to commit (chunk pairs, the fused down + combine with one warp
# per column, F16/BF16 decode GEMV rows split over 2-8 warps; the gate/up-launch quantization of
# call B/C removed). llama-bench is built (detached, -j14) while the CUDA tests run (nothing is
# timed then); after the build, nothing else running: qwen3 / gpt-oss decode with the split rows
# on and off (NITRO_DENSE_SPLIT=0), then nitro vs llama.cpp 80fb11a side by side, mirrored.
set -uo pipefail
T0=$(date +%s); el() { echo "$(( $(date +%s) - T0 )) s"; }
HERE=$(pwd); W=/tmp/nitro-dev; rm -rf "$W/bin"; mkdir -p "$W"; tar xJf .carry/bin.tar.xz -C "$W"
L=/tmp/llama; mkdir -p "$L"; tar xJf .carry/llama-src.tar.xz -C "$L"
( cd "$L" && cmake -S . -B b -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_OPENSSL=OFF > /tmp/llama_cfg.log 2>&1; echo "configure rc=$?"
  setsid nohup cmake --build b -j14 --target llama-bench > /tmp/llama_build.log 2>&1 < /dev/null & )
export LD_LIBRARY_PATH="$W/bin" NITRO_SOURCE_DIR="$HERE"
N="$W/bin/nitro"; B="$W/bin/nitro_cuda_bench"; LB=$L/b/bin/llama-bench; R=/tmp/rD; rm -rf "$R"; mkdir -p "$R"
trap 'tar czf "$OUT/rD.tgz" -C /tmp rD' EXIT
{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc; "$N" --version | head -1; } | tee "$R/env.txt"
( "$N" synth --arch gpt-oss --preset gpt-oss-20b -o /dev/shm/gpt-oss-20b.gguf > "$R/synth20.log" 2>&1; echo "synth 20b rc=$?"
  "$N" synth --arch qwen3moe --preset qwen3-30b-a3b --type q4_k -o /dev/shm/qwen3-30b-a3b.gguf > "$R/synth30.log" 2>&1; echo "synth 30b rc=$?" ) &
SY=$!
T="$W/bin/nitro_cuda_tests"
F1='Q8DotHost.*:CudaDenseSplit.*:CudaAttentionSplits.*:CudaOps.Mmvq*:CudaOps.MatmulGemv*:CudaOps.MatmulSameInput*:CudaOps.DenseGemv*:CudaOps.FusedDecodeRouter*:CudaOps.QuantizeQ8*:CudaOps.MoeThroughSlotTable*:CudaOps.FusedDecodeMoe*:CudaModel.SynthModels*:CudaModel.DecodeGraph*:CudaModel.OpProfile*:CudaBatch.*:CudaQwen3Next.GpuAll*:CudaHybrid.LongPrompts*'
timeout 330 "$T" --gtest_color=no --gtest_filter="$F1" > "$R/t1.log" 2>&1; echo "tests rc=$? at $(el)"
grep -E "^\[  FAILED|^\[  PASSED|tests ran" "$R/t1.log" | head -20; echo "OK: $(grep -c '^\[       OK' "$R/t1.log")"; grep "^\[ RUN" "$R/t1.log" | tail -1
grep -E "Failure|Expected|Which is|Aborted|worst|rows bit-identical" "$R/t1.log" | head -16 | cut -c1-250
wait $SY; echo "synth done at $(el)"
while pgrep -f "cmake --build b" > /dev/null && [ $(( $(date +%s) - T0 )) -lt 440 ]; do sleep 2; done
ls -la "$LB" || tail -3 /tmp/llama_build.log; echo "build wait over at $(el)"
# --- timed, nothing else running ---
ab() { timeout 40 env $3 "$B" "/dev/shm/$1.gguf" --no-kernels --pp 64 --depth 512 --reps 3 > "$R/ab_$1_$2.txt" 2>&1
       grep "GPU-all" "$R/ab_$1_$2.txt" | sed "s/^/[$2] /" | cut -c1-200; }
ab qwen3-30b-a3b split_on NITRO_X=1; ab qwen3-30b-a3b split_off NITRO_DENSE_SPLIT=0
ab gpt-oss-20b split_on NITRO_X=1; ab gpt-oss-20b split_off NITRO_DENSE_SPLIT=0
echo "A/B done at $(el)"
nb() { timeout 60 "$B" "/dev/shm/$1.gguf" --no-kernels --depth 512,4096 --reps 3 > "$R/nitro_$1_$2.txt" 2>&1
       grep "GPU-all" "$R/nitro_$1_$2.txt" | sed "s/^/[$2] /" | cut -c1-200; }
lb() { [ -x "$LB" ] || return; timeout 80 "$LB" -m "/dev/shm/$1.gguf" -ngl 99 -fa 1 -p 512 -n 128 -d 0,512,4096 -r 2 -o json > "$R/llama_$1_$2.json" 2> /dev/null
  python3 -c "
import json; d=json.load(open('$R/llama_$1_$2.json'))
print('[$2] MEASURED llama $1: ' + ', '.join('%s @ d%d %.1f' % ('pp%d' % r['n_prompt'] if r['n_prompt'] else 'tg%d' % r['n_gen'], r.get('n_depth', -1), r['avg_ts']) for r in d))"; }
for m in qwen3-30b-a3b gpt-oss-20b; do nb $m A; lb $m A; nb $m B; done
echo "side by side done at $(el)"
timeout 30 "$B" /dev/shm/qwen3-30b-a3b.gguf --no-kernels --pp 16 --tg 64 --reps 1 --ops > "$R/ops_qwen3.txt" 2>&1
grep -A14 "by op" "$R/ops_qwen3.txt" | cut -c1-170
echo "end at $(el)"
