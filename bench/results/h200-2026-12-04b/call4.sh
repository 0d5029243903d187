#!/usr/bin/env bash
# device call 4 (stop 34): (a) the grouped-rate cost model (main c6d9811) on qwen3-30b-a3b at 10.5 GiB:
# auto vs --prefill-cost-model stage at 4,096 and 13,000 tokens; (b) issue 19's prefetch cells
# (3072 vs 6144 B, AVX2 and AVX-512, one token, gpt-oss-20b's expert shape); (c) CPU-only decode of
# qwen3-30b-a3b (Q4_K synth) nitro vs llama.cpp (-ngl 0, no GPU visible), A B B A.
set -uo pipefail
T0=$(date +%s)
W=/tmp/nitro-dev; export LD_LIBRARY_PATH="$W/bin"; N="$W/bin/nitro"; LB=/tmp/llama/b/bin/llama-bench
R="$OUT/r"; mkdir -p "$R"
rm -f .carry/bin.tar.xz
MODEL=/dev/shm/qwen3-30b-a3b.gguf BUDGET=10.5 MAXP=13000 VARIANTS='q30auto_4096|4096|16|4096|;q30stage_4096|4096|16|4096|--prefill-cost-model stage;q30auto_13000|13000|16|4096|;q30stage_13000|13000|16|4096|--prefill-cost-model stage;q30autoB_4096|4096|16|4096|' \
    timeout 200 bash bench/prefill_device.sh sweep "$R" 2>&1 | grep -E "MEASURED|rates MEASURED" | cut -c1-400
echo "(a) done at $(( $(date +%s) - T0 )) s"
for pf in 3072 6144 3072; do for isa in avx2 avx512; do
  NITRO_ISA=$isa "$N" bench -m /dev/shm/gpt-oss-20b.gguf -t 16 --kernels mxfp4,q4_k,iq4_xs --kernel-tokens 1 --kernel-shape 2880x2880 \
     --kernel-experts 4 --kernel-seconds 0.25 --kernel-pool 2 --prefetch-bytes $pf --no-engine > "$R/k_${isa}_$pf.txt" 2>&1
  echo "== $isa prefetch $pf"; grep -iE "GB/s|%" "$R/k_${isa}_$pf.txt" | head -12
done; done
echo "(b) done at $(( $(date +%s) - T0 )) s"
nd() { "$N" bench -m /dev/shm/qwen3-30b-a3b.gguf -t 16 --kernels none -p 128 -n 32 > "$R/cpu_nitro_$1.txt" 2>&1; grep -E "prompt|decode" "$R/cpu_nitro_$1.txt" | grep -i "tok/s" | sed "s/^/[$1] nitro /"; }
ld() { CUDA_VISIBLE_DEVICES= "$LB" -m /dev/shm/qwen3-30b-a3b.gguf -ngl 0 -t 16 -p 128 -n 32 -r 1 -o json > "$R/cpu_llama_$1.json" 2>/dev/null
  python3 -c "
import json; d=json.load(open('$R/cpu_llama_$1.json'))
for r in d: print('[$1] llama %s %.2f tok/s' % ('pp%d' % r['n_prompt'] if r['n_prompt'] else 'tg%d' % r['n_gen'], r['avg_ts']))"; }
nd A; ld A; ld B; nd B
echo "(c) done at $(( $(date +%s) - T0 )) s"
