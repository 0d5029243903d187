#!/usr/bin/env bash
# device call 1 (stop 34): CUDA tests (qwen3next first: the scratch fix and the integer prompt GEMM;
# the integer prompt GEMM's op test; model and hybrid tests) while llama-bench builds (-j14); then
# the synth models for the next calls (gpt-oss-20b, qwen3-30b-a3b Q4_K, qwen3-next-80b-a3b IQ4_XS).
set -uo pipefail
T0=$(date +%s)
HERE=$(pwd); W=/tmp/nitro-dev; rm -rf "$W/bin"; mkdir -p "$W"; tar xJf .carry/bin.tar.xz -C "$W"
export LD_LIBRARY_PATH="$W/bin" NITRO_SOURCE_DIR="$HERE"
N="$W/bin/nitro"; R="$OUT/r"; mkdir -p "$R"
{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc; free -g | head -2; "$N" --version | head -2; } | tee "$R/env.txt"
L=/tmp/llama; mkdir -p "$L"; tar xJf .carry/llama-src.tar.xz -C "$L"
( cd "$L" && cmake -S . -B b -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_OPENSSL=OFF > "$R/llama_cfg.log" 2>&1 &&
  cmake --build b -j14 --target llama-bench > "$R/llama_build.log" 2>&1; echo "llama-bench build rc=$?" >> "$R/llama_build.log" ) &
BUILD=$!
T="$W/bin/nitro_cuda_tests"
timeout 200 "$T" --gtest_color=no --gtest_filter='CudaQwen3Next.*:CudaOps.MatmulPrompt*:CudaOps.MatmulGemv*:CudaOps.MoeMmq*' > "$R/t1.log" 2>&1; echo "tests 1 rc=$? at $(( $(date +%s) - T0 )) s"
grep -E "^\[  FAILED|^\[       OK|Failure|^\[  PASSED|tests ran|qwen3next fixture|positions, argmax|prompt GEMM|GEMV:" "$R/t1.log" | head -60
timeout 170 "$T" --gtest_color=no --gtest_filter='CudaModel.Synth*:CudaHybrid.PromptPaths*:CudaHybrid.StagedPrompt*:CudaHybrid.LayerMajor*:CudaBatch.*' > "$R/t2.log" 2>&1; echo "tests 2 rc=$? at $(( $(date +%s) - T0 )) s"
grep -E "^\[  FAILED|^\[       OK|Failure|^\[  PASSED|tests ran" "$R/t2.log" | head -40
"$N" synth --arch gpt-oss --preset gpt-oss-20b -o /dev/shm/gpt-oss-20b.gguf > "$R/synth20.log" 2>&1; echo "synth 20b rc=$? at $(( $(date +%s) - T0 )) s"
"$N" synth --arch qwen3moe --preset qwen3-30b-a3b --type q4_k -o /dev/shm/qwen3-30b-a3b.gguf > "$R/synth30.log" 2>&1; echo "synth 30b rc=$? at $(( $(date +%s) - T0 )) s"
M80=/dev/shm/qwen3-next-80b-a3b.gguf
SY80() { "$N" synth --arch qwen3next --preset qwen3-next-80b-a3b --type iq4_xs --dense-type q8_0 -o "$M80" > "$R/synth80.log" 2>&1 && echo "iq4_xs q8_0" > "$M80.key"; echo "synth 80b rc=$? at $(( $(date +%s) - T0 )) s"; }; SY80 & SYP=$!
while kill -0 "$BUILD" 2>/dev/null && [ $(( $(date +%s) - T0 )) -lt 545 ]; do sleep 5; done
wait $SYP
echo "end at $(( $(date +%s) - T0 )) s"; tail -2 "$R/llama_build.log"; ls -la /dev/shm; free -g | head -2
