#!/usr/bin/env bash
# device call G (issue 15, 2026-12-05): the two prefetches that helped in call F2's op profile, alone
# (NITRO_L2_PREFETCH mask: 1 the decode attention's K/V rows before its PDL wait, 2 the down
# matrices' shares from the gate/up blocks), A/B against none, mirrored; their tests first.
set -uo pipefail
T0=$(date +%s); el() { echo "$(( $(date +%s) - T0 )) s"; }
HERE=$(pwd); W=/tmp/nitro-dev; rm -rf "$W"; mkdir -p "$W"; tar xJf .carry/bin.tar.xz -C "$W"
export LD_LIBRARY_PATH="$W/bin" NITRO_SOURCE_DIR="$HERE"
N="$W/bin/nitro"; B="$W/bin/nitro_cuda_bench"; R=/tmp/rG; rm -rf "$R"; mkdir -p "$R"; cp .carry/callG.sh "$R/"
trap 'tar czf "$OUT/rG.tgz" -C /tmp rG' EXIT
{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; "$N" --version | head -1; } | tee "$R/env.txt"
( "$N" synth --arch gpt-oss --preset gpt-oss-20b -o /dev/shm/gpt-oss-20b.gguf > "$R/synth20.log" 2>&1 ) &
S1=$!
( "$N" synth --arch qwen3moe --preset qwen3-30b-a3b --type q4_k -o /dev/shm/qwen3-30b-a3b.gguf > "$R/synth30.log" 2>&1 ) &
S2=$!
F='CudaModel.DecodeGraph*:CudaOps.AttentionMatchesCpu:CudaOps.FusedDecodeMoe*'
timeout 60 "$W/bin/nitro_cuda_tests" --gtest_color=no --gtest_filter="$F" > "$R/t.log" 2>&1; echo "tests rc=$? at $(el)"
grep -E "^\[  FAILED|^\[  PASSED|tests ran" "$R/t.log" | head; echo "OK: $(grep -c '^\[       OK' "$R/t.log")"
grep -E "Failure|Expected|Which is|Aborted" "$R/t.log" | head -8 | cut -c1-250
wait $S1 $S2; echo "synth done at $(el)"
nb() { [ $(( $(date +%s) - T0 )) -lt 200 ] || { echo "skip $1 $2 (time)"; return; }
       timeout 40 env NITRO_L2_PREFETCH=$3 "$B" "/dev/shm/$1.gguf" --no-kernels --depth 512,4096 --reps 3 > "$R/nitro_$1_$2.txt" 2>&1
       grep "GPU-all" "$R/nitro_$1_$2.txt" | sed "s/^/[$2 mask=$3] /" | sed 's/ (median of 3)//; s/ kernel launches per decode token (one CUDA graph, [0-9]* programmatic edges,/ launches,/' | cut -c1-200; }
q=qwen3-30b-a3b g=gpt-oss-20b
nb $q A 3; nb $q B 0; nb $q C 0; nb $q D 3; echo "qwen3 at $(el)"
nb $g A 3; nb $g B 0; echo "gpt-oss at $(el)"
[ $(( $(date +%s) - T0 )) -lt 215 ] && timeout 25 env NITRO_L2_PREFETCH=3 "$B" /dev/shm/$q.gguf --no-kernels --pp 16 --tg 64 --reps 1 --ops > "$R/ops_q_3.txt" 2>&1
[ $(( $(date +%s) - T0 )) -lt 235 ] && timeout 25 env NITRO_L2_PREFETCH=0 "$B" /dev/shm/$q.gguf --no-kernels --pp 16 --tg 64 --reps 1 --ops > "$R/ops_q_0.txt" 2>&1
paste <(grep -A12 "by op" "$R/ops_q_3.txt" | cut -c1-75) <(grep -A12 "by op" "$R/ops_q_0.txt" | cut -c1-60)
echo "end at $(el)"
