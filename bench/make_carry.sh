#!/usr/bin/env bash
# Packs what the device scripts (bench/*_device.sh) read from .carry/ (git-ignored), on the
# development machine, after `cmake --build build-cuda` (CUDA build for sm_90):
#   .carry/bin.tar.xz       bin/{nitro,nitro_cuda_tests,nitro_cuda_bench} + the Debian shared
#                           libraries they need that the device image lacks
#   .carry/fixtures.tar.xz  shared/fixtures (the tiny GGUFs and their llama.cpp goldens)
#   .carry/llama-src.tar.xz llama.cpp 80fb11a's source from node-llama-cpp's bundle (git archive,
#                           without models/docs/tests) for llama-bench with CUDA (only with --llama)
#   .carry/cpu.tar.xz       (only with --cpu CPU_BUILD, alone) cpu/{nitro, nitro_tests, the Debian
#                           libraries, llama-peer/}: the CPU build and llama.cpp's CPU peer for
#                           bench/cpu_kernels_device.sh (run it with LD_LIBRARY_PATH=cpu)
# usage: bench/make_carry.sh [--llama] [BUILD_DIR=build-cuda]
#        bench/make_carry.sh --cpu [CPU_BUILD_DIR=build]
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = --cpu ]; then
    B=${2:-build}
    mkdir -p .carry
    T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
    mkdir -p "$T/cpu/llama-peer"
    cp "$B/nitro" "$T/cpu/" && strip --strip-unneeded "$T/cpu/nitro"
    # the unit tests, for the kernel levels the development machine lacks (AVX-VNNI, AVX-512):
    # cpu/nitro_tests --gtest_filter='CpuMatmul*:CpuMoe*' needs no reference data
    cp "$B/tests/nitro_tests" "$T/cpu/" && strip --strip-unneeded "$T/cpu/nitro_tests"
    for lib in libfmt.so.9 libxxhash.so.0 libpcre2-8.so.0 libcpp-httplib.so.0.11; do cp -L "/lib/x86_64-linux-gnu/$lib" "$T/cpu/"; done
    # llama.cpp's peer with the CPU variants the ggml loader would choose on the lent Xeon
    # (sapphirerapids), the AVX2 comparison (haswell) and the baseline (x64)
    for f in llama_cpp_bench libggml-base.so libggml.v0.4.0.so libllama.v0.4.0.so libggml-cpu-sapphirerapids.so \
             libggml-cpu-haswell.so libggml-cpu-x64.so; do cp -P "$B/llama-peer/$f" "$T/cpu/llama-peer/"; done
    XZ_OPT=-9 tar cJf .carry/cpu.tar.xz -C "$T" cpu
    ls -la .carry/cpu.tar.xz
    exit 0
fi
LLAMA=0; [ "${1:-}" = --llama ] && { LLAMA=1; shift; }
B=${1:-build-cuda}
SHARED=${NITRO_SHARED_DIR:-$(cd .. && pwd)/shared}
mkdir -p .carry
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
mkdir -p "$T/bin"
# nitro_cuda_bench (the GPU kernel figures) only with CARRY_CUDA_BENCH=1: it costs 2 MB of the call's 64 MiB
BINS=("$B/nitro" "$B/tests/nitro_cuda_tests"); [ "${CARRY_CUDA_BENCH:-0}" = 1 ] && BINS+=("$B/tests/nitro_cuda_bench" "$B/tests/dev_moe_gemm" "$B/tests/dev_moe_mmq" "$B/tests/dev_attention" "$B/tests/dev_attention_decode")
# stripped: symbols are not needed on the device, and a call carries 64 MiB in all
for f in "${BINS[@]}"; do [ -f "$f" ] && cp "$f" "$T/bin/" && strip --strip-unneeded "$T/bin/$(basename "$f")"; done
for lib in libfmt.so.9 libxxhash.so.0 libpcre2-8.so.0 libcpp-httplib.so.0.11; do
    cp -L "/lib/x86_64-linux-gnu/$lib" "$T/bin/"
done
# xz -9: a 64 MiB dictionary, so the three binaries' identical kernel images compress once
XZ_OPT=-9 tar cJf .carry/bin.tar.xz -C "$T" bin
mkdir -p "$T/s/shared"; cp -r "$SHARED/fixtures" "$T/s/shared/"
tar cJf .carry/fixtures.tar.xz -C "$T/s" shared
# The repository itself takes most of a call's 64 MiB, so the fixtures may have to travel in pieces
# over several calls of one warm machine: .carry/fx/fixtures.part-aa, -ab, ... (FX_PART_BYTES each;
# rejoin with cat on the device).
rm -rf .carry/fx; mkdir -p .carry/fx
split -b "${FX_PART_BYTES:-7300000}" .carry/fixtures.tar.xz .carry/fx/fixtures.part-
if [ "$LLAMA" = 1 ]; then
    git clone -q tools/peer/node_modules/node-llama-cpp/llama/gitRelease.bundle "$T/llama" 2>/dev/null
    (cd "$T/llama" && git archive HEAD | tar x -C "$T" --one-top-level=llama-src --anchored --exclude=models --exclude=docs --exclude=tests)
    # Only what llama-bench's build reads, so the tarball fits beside the repository in a device
    # call's 64 MiB: no other tools, examples, web UI, media, Python, or other ggml backends; the
    # CMake files of what is dropped become empty (tools/ builds llama-bench alone). The sources
    # that are built are llama.cpp's, unchanged.
    (cd "$T/llama-src"
     rm -rf media benches examples pocs app gguf-py conversion scripts grammars vendor/miniaudio/*.h
     find tools -mindepth 1 -maxdepth 1 ! -name llama-bench ! -name CMakeLists.txt -exec rm -rf {} +
     printf 'find_package(Threads REQUIRED)\nllama_add_compile_flags()\nadd_subdirectory(llama-bench)\n' > tools/CMakeLists.txt
     for d in ggml/src/ggml-*/; do case "$d" in */ggml-cuda/|*/ggml-cpu/) ;; *) rm -rf "$d" ;; esac; done
     mkdir -p examples pocs app && : > examples/CMakeLists.txt && : > pocs/CMakeLists.txt && : > app/CMakeLists.txt)
    tar cJf .carry/llama-src.tar.xz -C "$T/llama-src" .
fi
ls -la .carry
