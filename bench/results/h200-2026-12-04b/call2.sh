#!/usr/bin/env bash
# device call 2 (stop 34): issue 15 side by side, GPU-all, nothing else running: nitro_cuda_bench
# (pp512 + tg128, then pp4096) and llama-bench (-p 512,4096 -n 128, ubatch 512 and 4096), mirrored.
set -uo pipefail
W=/tmp/nitro-dev; export LD_LIBRARY_PATH="$W/bin"; B="$W/bin/nitro_cuda_bench"; LB=/tmp/llama/b/bin/llama-bench
R="$OUT/r"; mkdir -p "$R"
nb() { "$B" "/dev/shm/$1.gguf" --no-kernels --pp "$2" --tg "$3" --reps 2 > "$R/nitro_$1_$2_$4.txt" 2>&1; grep -E "MEASURED" "$R/nitro_$1_$2_$4.txt" | sed "s/^/[$4] /"; }
lb() { "$LB" -m "/dev/shm/$1.gguf" -ngl 99 -fa 1 -t 16 -p 512,4096 -n 128 -b 4096 -ub 512,4096 -r 2 -o json > "$R/llama_$1_$2.json" 2> "$R/llama_$1_$2.err"
  python3 -c "
import json; d=json.load(open('$R/llama_$1_$2.json'))
for r in d: print('[$2] MEASURED llama $1 ub%d: %s %.1f tok/s' % (r['n_ubatch'], 'pp%d' % r['n_prompt'] if r['n_prompt'] else 'tg%d' % r['n_gen'], r['avg_ts']))"; }
for m in gpt-oss-20b qwen3-30b-a3b; do
  nb $m 512 128 A; nb $m 4096 16 A; lb $m A; lb $m B; nb $m 4096 16 B; nb $m 512 128 B
done
"$B" /dev/shm/qwen3-30b-a3b.gguf --no-kernels --pp 512 --tg 64 --reps 1 --ops > "$R/ops_q30.txt" 2>&1; grep -vE "^$" "$R/ops_q30.txt" | tail -30
