#!/usr/bin/env bash
# device call 1 (stop 33): the CUDA tests (qwen3next fixture after the scratch fix, prompts with
# --prefill-pin auto as the default, the cost model's in-place experts) while llama-bench builds and
# the gpt-oss-120b synth is written to /dev/shm in the background.
set -uo pipefail
HERE=$(pwd); W=/tmp/nitro-dev; rm -rf "$W/bin"; mkdir -p "$W"; tar xJf .carry/bin.tar.xz -C "$W"
export LD_LIBRARY_PATH="$W/bin" NITRO_SOURCE_DIR="$HERE"
N="$W/bin/nitro"; R="$OUT/r"; mkdir -p "$R"
{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc; free -g | head -2; "$N" --version; } | tee "$R/env.txt"
L=/tmp/llama; mkdir -p "$L"; tar xJf .carry/llama-src.tar.xz -C "$L"
( cd "$L" && cmake -S . -B b -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_OPENSSL=OFF > "$R/llama_cfg.log" 2>&1 &&
  cmake --build b -j8 --target llama-bench > "$R/llama_build.log" 2>&1; echo "llama-bench build rc=$?" >> "$R/llama_build.log" ) &
( "$N" synth --arch gpt-oss --preset gpt-oss-120b -o /dev/shm/bench.gguf > "$R/synth120.log" 2>&1 && echo gpt-oss-120b > /dev/shm/bench.gguf.key ) &
F='CudaHybrid.*:CudaAdaptive.LiveEquals*:CudaBatch.*:CudaModel.Synth*:CudaQwen3Next.*:CudaOps.*'
timeout 330 "$W/bin/nitro_cuda_tests" --gtest_color=no --gtest_filter="$F" > "$R/cuda_tests.log" 2>&1; echo "cuda tests rc=$?"
grep -E "^\[  FAILED|^\[       OK|Failure|^\[  PASSED|tests ran" "$R/cuda_tests.log" | head -80
grep -E "pinned in place|qwen3next fixture|13000 tokens" "$R/cuda_tests.log" | head -30
wait
date -u; ls -la /dev/shm; tail -1 "$R/llama_build.log"; tail -2 "$R/synth120.log"; free -g | head -2
