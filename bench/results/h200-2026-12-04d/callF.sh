#!/usr/bin/env bash
# device call F (stop 36): the CUDA tests call E's 270 s did not reach (same binaries).
set -uo pipefail
T0=$(date +%s); W=/tmp/nitro-dev; rm -rf "$W/bin"; mkdir -p "$W"; tar xJf .carry/bin.tar.xz -C "$W"
export LD_LIBRARY_PATH="$W/bin" NITRO_SOURCE_DIR="$(pwd)"
F='CudaOps.MoeGrouped*:CudaOps.MoeMmq*:CudaOps.MoeGroupOn*:CudaQwen3Next.GpuAll*:CudaQwen3Next.Hybrid*:CudaQwen3Next.Truncate*:CudaQwen3Next.Conv*'
timeout 200 "$W/bin/nitro_cuda_tests" --gtest_color=no --gtest_filter="$F" > "$OUT/tF.log" 2>&1; echo "tests rc=$? at $(( $(date +%s) - T0 )) s"
grep -E "^\[       OK|^\[  FAILED|^\[  PASSED" "$OUT/tF.log" | head -20
grep -E "Failure|Expected|Which is|evaluates|Aborted" "$OUT/tF.log" | head -10
