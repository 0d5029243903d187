#!/usr/bin/env bash
# device call F1 (issue 15 + 19, 2026-12-05): the L2 prefetch of the decode GEMVs' weight rows
# before griddepcontrol.wait. llama-bench (80fb11a, CUDA sm_90) is built detached (-j14) while the
# CUDA tests and the CPU kernel-matrix tests run and the synthetic models are written; nothing is
# timed in this call (F2 times, on the same warm machine).
set -uo pipefail
T0=$(date +%s); el() { echo "$(( $(date +%s) - T0 )) s"; }
HERE=$(pwd); W=/tmp/nitro-dev; rm -rf "$W"; mkdir -p "$W"; tar xJf .carry/bin.tar.xz -C "$W"; tar xJf .carry/cpu.tar.xz -C "$W"
L=/tmp/llama; rm -rf "$L"; mkdir -p "$L"; tar xJf .carry/llama-src.tar.xz -C "$L"
( cd "$L" && cmake -S . -B b -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_OPENSSL=OFF > /tmp/llama_cfg.log 2>&1; echo "configure rc=$?"
  setsid nohup cmake --build b -j14 --target llama-bench > /tmp/llama_build.log 2>&1 < /dev/null & )
export LD_LIBRARY_PATH="$W/bin" NITRO_SOURCE_DIR="$HERE"
N="$W/bin/nitro"; R=/tmp/rF; rm -rf "$R"; mkdir -p "$R"; cp .carry/callF*.sh "$R/"
trap 'tar czf "$OUT/rF1.tgz" -C /tmp rF' EXIT
{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc; lscpu | grep 'Model name'; "$N" --version | head -1; } | tee "$R/env.txt"
( "$N" synth --arch gpt-oss --preset gpt-oss-20b -o /dev/shm/gpt-oss-20b.gguf > "$R/synth20.log" 2>&1; echo "synth 20b rc=$? at $(el)" ) &
S1=$!
( "$N" synth --arch qwen3moe --preset qwen3-30b-a3b --type q4_k -o /dev/shm/qwen3-30b-a3b.gguf > "$R/synth30.log" 2>&1; echo "synth 30b rc=$? at $(el)" ) &
S2=$!
F='Q8DotHost.*:CudaOps.Mmvq*:CudaOps.MatmulGemv*:CudaOps.MatmulSameInput*:CudaOps.DenseGemv*:CudaOps.FusedDecodeRouter*:CudaOps.Router*:CudaOps.QuantizeQ8*:CudaOps.MoeThroughSlotTable*:CudaOps.FusedDecodeMoe*:CudaOps.Attention*:CudaAttentionSplits.*:CudaModel.SynthModels*:CudaModel.DecodeGraph*:CudaModel.OpProfile*:CudaModel.RouteEvents*:CudaBatch.*:CudaQwen3Next.GpuAll*:CudaHybrid.BitIdentical*:CudaHybrid.StagedPrompt*:CudaHybrid.LayerMajor*'
timeout 300 "$W/bin/nitro_cuda_tests" --gtest_color=no --gtest_filter="$F" > "$R/t1.log" 2>&1; echo "cuda tests rc=$? at $(el)"
grep -E "^\[  FAILED|^\[  PASSED|tests ran" "$R/t1.log" | head -20; echo "OK: $(grep -c '^\[       OK' "$R/t1.log")"; grep "^\[ RUN" "$R/t1.log" | tail -1
grep -E "Failure|Expected|Which is|Aborted|worst" "$R/t1.log" | head -12 | cut -c1-250
LD_LIBRARY_PATH="$W/cpu" timeout 100 "$W/cpu/nitro_tests" --gtest_color=no --gtest_filter='CpuMatmul*:CpuMoe*' > "$R/cpu_tests.txt" 2>&1; echo "cpu tests rc=$? at $(el)"
grep -E '^\[  PASSED|^\[  FAILED|SKIPPED' "$R/cpu_tests.txt" | head -8
lscpu | grep Flags | tr ' ' '\n' | grep -E '^(avx2|avx_vnni|avx512f|avx512_vnni|avx512bw|amx_int8)$' | tr '\n' ' '; echo
wait $S1 $S2; echo "synth done at $(el)"; ls -la /dev/shm/*.gguf
while pgrep -f "cmake --build b" > /dev/null && [ $(( $(date +%s) - T0 )) -lt 560 ]; do sleep 2; done
ls -la "$L/b/bin/llama-bench" || tail -5 /tmp/llama_build.log; echo "end at $(el)"
