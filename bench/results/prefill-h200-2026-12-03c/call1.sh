#!/usr/bin/env bash
# device call 1 (stop 32): this stop's CUDA tests (groups through eval_batch, long prompts in every
# placement, experts staged from file pages pinned in place, the refactored comparisons) while
# llama-bench builds and the two synth models are written to /dev/shm in the background.
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
( "$N" synth --arch qwen3moe --preset qwen3-30b-a3b --type q4_k -o /dev/shm/q30.gguf > "$R/synthq30.log" 2>&1 ) &
F='CudaHybrid.PromptPaths*:CudaHybrid.StagedPrompt*:CudaHybrid.LayerMajor*:CudaHybrid.GroupsServe*:CudaHybrid.LongPrompts*:CudaAdaptive.LiveEquals*:CudaBatch.*:CudaModel.Synth*:CudaQwen3Next.*:CudaOps.*'
timeout 430 "$W/bin/nitro_cuda_tests" --gtest_color=no --gtest_filter="$F" > "$R/cuda_tests.log" 2>&1; echo "cuda tests rc=$?"
grep -E "^\[  FAILED|^\[       OK|Failure|^\[  PASSED|tests ran" "$R/cuda_tests.log" | head -70
grep -E "copied in place|13000 tokens|gpu-all -u 512 vs|GroupsServe" "$R/cuda_tests.log" | head -40
wait
date -u; ls -la /dev/shm; tail -1 "$R/llama_build.log"; tail -2 "$R/synth120.log" "$R/synthq30.log"
