#!/usr/bin/env bash
# The test command (README, .ci/run): set up, build, a bounded fuzz run of the GGUF reader, then
# every CPU test with ctest. Tests labelled `cuda` need a GPU and are skipped here; run them on a
# GPU machine with `ctest --test-dir build-cuda -L cuda`.
# Tests read the shared reference data from ../shared (override with NITRO_SHARED_DIR=...).
set -euo pipefail
cd "$(dirname "$0")/.."
shared="${NITRO_SHARED_DIR:-$(cd .. && pwd)/shared}"
# build/ is the CPU build here (NITRO_CUDA=0 unless set): the CUDA backend is compiled into
# build-cuda below, and the ctest run at the end takes the CPU tests from build/.
NITRO_CUDA="${NITRO_CUDA:-0}" NITRO_CMAKE_ARGS="-DNITRO_SHARED_DIR=$shared ${NITRO_CMAKE_ARGS:-}" bash scripts/setup.sh

# Fuzz smoke: the GGUF reader under libFuzzer + ASan/UBSan for FUZZ_SECONDS (default 30).
cmake -S . -B build-fuzz -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
      -DCMAKE_BUILD_TYPE=RelWithDebInfo -DNITRO_FUZZ=ON -DNITRO_TESTS=OFF -DNITRO_BENCH=OFF >/dev/null
cmake --build build-fuzz -j"$(nproc)" --target fuzz_gguf
corpus="$(mktemp -d "${TMPDIR:-/tmp}/nitro-fuzz-XXXXXX")"
trap 'rm -rf "$corpus"' EXIT
cp tests/fuzz/corpus/* "$corpus"/
echo "fuzz: fuzz_gguf for ${FUZZ_SECONDS:-30} s"
(cd "$corpus" && "$OLDPWD"/build-fuzz/tests/fuzz/fuzz_gguf -max_total_time="${FUZZ_SECONDS:-30}" \
     -rss_limit_mb=2048 -print_final_stats=0 . 2>&1 | tail -n 3)
rm -rf "$corpus"

# CUDA backend: compile only (CI has no GPU; the `cuda` tests run on a GPU machine, docs/cuda.md).
# CI compiles SASS for sm_90 (H100/H200) and sm_86 (consumer Ampere) to keep the time bounded on
# 2 cores; a release build uses the full list (NITRO_CUDA_ARCHS default: 80;86;89;90;120).
nvcc="${CUDACXX:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
if [ -x "$nvcc" ]; then
  cmake -S . -B build-cuda -G Ninja -DNITRO_CUDA=ON -DCMAKE_CUDA_COMPILER="$nvcc" \
        -DNITRO_CUDA_ARCHS="${NITRO_CUDA_CI_ARCHS:-86;90}" -DNITRO_BENCH=OFF -DNITRO_SHARED_DIR="$shared" >/dev/null
  cmake --build build-cuda -j"$(nproc)" --target nitro nitro_cuda_tests nitro_cuda_bench \
        dev_moe_gemm dev_moe_mmq dev_attention dev_attention_decode
  echo "cuda: build-cuda compiled (tests labelled cuda need a GPU: ctest --test-dir build-cuda -L cuda)"
else
  echo "cuda: WARNING: no nvcc found, the CUDA backend was NOT compiled (set CUDACXX)" >&2
fi

# Tests must clean up after themselves: they run with a private TMPDIR that must be empty at the end.
test_tmp="$(mktemp -d "${TMPDIR:-/tmp}/nitro-ctest-XXXXXX")"
status=0
TMPDIR="$test_tmp" ctest --test-dir build --output-on-failure -LE cuda -j"$(nproc)" || status=$?
left="$(cd "$test_tmp" && find . -mindepth 1 -maxdepth 2 | head -n 20)"
rm -rf "$test_tmp"
if [ -n "$left" ]; then
    echo "test.sh: FAIL: the tests left files in their TMPDIR:" >&2
    echo "$left" | sed 's/^/    /' >&2
    status=1
fi
exit $status
