#!/usr/bin/env bash
# The peer of `nitro bench -o DIR --peer-cmd` on the lent GPU machine: llama.cpp's llama-bench on
# the same file, in the placement that matches the step's mode (bench/report_device.sh uses it).
#   bench/llama_bench_peer.sh LLAMA_BENCH NITRO MODEL CTX N_GEN THREADS MODE BUDGET_GIB
# Prints one llama-bench JSON array with two tests, as nitro bench's parser reads them: the prompt
# test (n_prompt CTX at depth 0, like nitro's prefill) and the decode test (N_GEN tokens at depth
# CTX, like nitro's decode). They are two llama-bench runs (one run of `-d 0,CTX` would time four
# tests, two of them prefilling CTX tokens again), each with -r 1 --no-warmup (nitro bench times
# one run per repetition without a warm-up; --repeat gives the repetitions, mirrored A B B A).
# Placement by mode:
#   cpu     CUDA_VISIBLE_DEVICES= and -ngl 0 (the same binary without a GPU)
#   gpu     -ngl 99 -fa 1 (every layer on the GPU)
#   hybrid  -ngl 99 -fa 1 -ncmoe N, N = the layers whose experts `nitro plan --residency layers`
#           leaves on the CPU at the same budget and context: llama.cpp's whole-layer placement of
#           the same VRAM (ASSUMED equivalent: llama.cpp's own runtime and buffers differ a little)
set -euo pipefail
LB=$1 N=$2 M=$3 CTX=$4 NGEN=$5 T=$6 MODE=$7 BUDGET=$8
common=(-m "$M" -t "$T" -r 1 --no-warmup -o json)
case "$MODE" in
cpu) export CUDA_VISIBLE_DEVICES=; place=(-ngl 0) ;;
gpu) place=(-ngl 99 -fa 1) ;;
hybrid)
    ncmoe=$("$N" plan -m "$M" --vram-budget "$BUDGET" -c $((CTX + NGEN)) --residency layers --json |
        python3 -c 'import json, sys; print(sum(1 for l in json.load(sys.stdin)["layers"] if not l["resident"]))')
    echo "llama_bench_peer: --vram-budget $BUDGET -> -ncmoe $ncmoe" >&2
    place=(-ngl 99 -fa 1 -ncmoe "$ncmoe") ;;
*) echo "llama_bench_peer: unknown mode $MODE" >&2; exit 2 ;;
esac
pp=$("$LB" "${common[@]}" "${place[@]}" -p "$CTX" -n 0 -d 0)
tg=$("$LB" "${common[@]}" "${place[@]}" -p 0 -n "$NGEN" -d "$CTX")
python3 -c 'import json, sys; print(json.dumps(json.loads(sys.argv[1]) + json.loads(sys.argv[2])))' "$pp" "$tg"
