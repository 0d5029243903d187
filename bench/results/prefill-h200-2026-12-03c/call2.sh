#!/usr/bin/env bash
# device call (stop 32, second machine): the two fixed tests, then gpt-oss-120b at 12 GiB, 4,096
# tokens: nitro --prefill-pin 32 against llama-bench -ncmoe 31 -ub 4096 mirrored, then nitro without pin.
set -uo pipefail
HERE=$(pwd); W=/tmp/nitro-dev; rm -rf "$W/bin"; mkdir -p "$W"; tar xJf .carry/bin.tar.xz -C "$W"
export LD_LIBRARY_PATH="$W/bin" NITRO_SOURCE_DIR="$HERE"
N="$W/bin/nitro"; R="$OUT/r"; mkdir -p "$R"
L=/tmp/llama; mkdir -p "$L"; tar xJf .carry/llama-src.tar.xz -C "$L"
( cd "$L" && cmake -S . -B b -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_OPENSSL=OFF > "$R/llama_cfg.log" 2>&1 &&
  cmake --build b -j10 --target llama-bench > "$R/llama_build.log" 2>&1; echo "llama-bench build rc=$?" >> "$R/llama_build.log" ) &
( "$N" synth --arch gpt-oss --preset gpt-oss-120b -o /dev/shm/bench.gguf > "$R/synth120.log" 2>&1 && echo gpt-oss-120b > /dev/shm/bench.gguf.key ) &
timeout 150 "$W/bin/nitro_cuda_tests" --gtest_color=no --gtest_filter='CudaHybrid.StagedPrompt*:CudaHybrid.GroupsServe*' > "$R/cuda_tests.log" 2>&1; echo "cuda tests rc=$?"
grep -E "^\[  FAILED|^\[       OK|Failure|^\[  PASSED|copied in place" "$R/cuda_tests.log" | head -40
wait; date -u; tail -1 "$R/llama_build.log"
NITRO_OPTS="--prefill-pin 32" LLAMA_UB=4096 PROMPTS=4096 CPU_BASELINE=0 MIRROR=1 timeout 200 bash bench/prefill_device.sh bench "$R" 2>&1 | grep -v "^\["
MAXP=4096 VARIANTS='pin0|4096|16|4096|--prefill-pin 0' timeout 60 bash bench/prefill_device.sh sweep "$R" 2>&1 | grep -E "MEASURED|pinned"
