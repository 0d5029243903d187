#!/usr/bin/env bash
# device call E (stop 37): the CUDA tests of this stop's changes on the committed binaries (303983f +
# the test bounds of bba5cd0), nothing timed.
set -uo pipefail
T0=$(date +%s); el() { echo "$(( $(date +%s) - T0 )) s"; }
HERE=$(pwd); W=/tmp/nitro-dev; rm -rf "$W/bin"; mkdir -p "$W"; tar xJf .carry/bin.tar.xz -C "$W"
export LD_LIBRARY_PATH="$W/bin" NITRO_SOURCE_DIR="$HERE"
R=/tmp/rE; rm -rf "$R"; mkdir -p "$R"; trap 'tar czf "$OUT/rE.tgz" -C /tmp rE' EXIT
{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; "$W/bin/nitro" --version | head -1; } | tee "$R/env.txt"
F1='Q8DotHost.*:CudaAttentionSplits.*:CudaOps.Mmvq*:CudaOps.MatmulGemv*:CudaOps.MatmulSameInput*:CudaOps.DenseGemv*:CudaOps.FusedDecodeRouter*:CudaOps.QuantizeQ8*:CudaOps.MoeThroughSlotTable*:CudaOps.FusedDecodeMoe*:CudaModel.SynthModels*:CudaModel.DecodeGraph*:CudaModel.OpProfile*:CudaBatch.*:CudaHybrid.LongPrompts*:CudaQwen3Next.GpuAll*'
timeout 330 "$W/bin/nitro_cuda_tests" --gtest_color=no --gtest_filter="$F1" > "$R/t.log" 2>&1; echo "tests rc=$? at $(el)"
grep -E "^\[  FAILED|^\[  PASSED|tests ran|random seed" "$R/t.log" | head -20; echo "OK: $(grep -c '^\[       OK' "$R/t.log")"; grep "^\[ RUN" "$R/t.log" | tail -1
grep -E "Failure|Expected|Which is|Aborted|worst|13000 tokens gpu-all" "$R/t.log" | head -16 | cut -c1-250
