#!/usr/bin/env bash
# device call C (stop 36), as call A: llama.cpp's source to /tmp/llama, configured, and its llama-bench build
# started detached (the next call carries the nitro binaries: both do not fit in one call's 64 MiB).
set -uo pipefail
L=/tmp/llama; mkdir -p "$L"; tar xJf .carry/llama-src.tar.xz -C "$L"
cd "$L" && cmake -S . -B b -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_OPENSSL=OFF > /tmp/llama_cfg.log 2>&1; echo "configure rc=$?"
setsid nohup cmake --build b -j14 --target llama-bench > /tmp/llama_build.log 2>&1 < /dev/null &
sleep 3; pgrep -f "cmake --build b" > /dev/null && echo "llama-bench build running"
