#!/usr/bin/env bash
# device call C (stop 37), right after call B on the same machine (its llama-bench build and
# /dev/shm models): nothing else running. Kernel figures; qwen3-30b-a3b decode with each change of
# this stop switched off in turn (NITRO_MMVQ_PAIRS=0, NITRO_MOE_FUSE_Q8=0); then nitro vs llama.cpp
# 80fb11a (-fa 1) side by side, mirrored (nitro, llama, nitro), on both synthetic models: pp512,
# tg128 at depth 0 / 512 / 4096, and pp4096; the qwen3 decode step by op.
set -uo pipefail
T0=$(date +%s); el() { echo "$(( $(date +%s) - T0 )) s"; }
HERE=$(pwd); W=/tmp/nitro-dev
[ -x "$W/bin/nitro" ] || { mkdir -p "$W"; tar xJf .carry/bin.tar.xz -C "$W"; }
export LD_LIBRARY_PATH="$W/bin" NITRO_SOURCE_DIR="$HERE"
B="$W/bin/nitro_cuda_bench"; LB=/tmp/llama/b/bin/llama-bench; R=/tmp/rC; rm -rf "$R"; mkdir -p "$R"
trap 'tar czf "$OUT/rC.tgz" -C /tmp rC' EXIT
while pgrep -f "cmake --build b" > /dev/null && [ $(( $(date +%s) - T0 )) -lt 200 ]; do sleep 2; done
ls -la "$LB" || tail -5 /tmp/llama_build.log; ls -la /dev/shm/*.gguf; echo "start at $(el)"
timeout 60 "$B" /dev/shm/qwen3-30b-a3b.gguf --pp 0 > "$R/kernels.txt" 2>&1; echo "kernels rc=$? at $(el)"
grep -E "copy|Q4_K|Q5_K|MXFP4 |Q8_0 |Q6_K|IQ4_XS|token\(s\)|decode MoE" "$R/kernels.txt" | head -24 | cut -c1-230
ab() { timeout 40 env $2 "$B" /dev/shm/qwen3-30b-a3b.gguf --no-kernels --pp 64 --depth 512 --reps 3 > "$R/ab_$1.txt" 2>&1
       grep "GPU-all" "$R/ab_$1.txt" | sed "s/^/[$1] /" | cut -c1-200; }
ab default "NITRO_X=1"; ab pairs_off "NITRO_MMVQ_PAIRS=0"; ab fuse_q8_off "NITRO_MOE_FUSE_Q8=0"; ab both_off "NITRO_MMVQ_PAIRS=0 NITRO_MOE_FUSE_Q8=0"; ab default2 "NITRO_X=1"
echo "A/B done at $(el)"
nb() { timeout 60 "$B" "/dev/shm/$1.gguf" --no-kernels --depth 512,4096 --reps 3 > "$R/nitro_$1_$2.txt" 2>&1
       grep "GPU-all" "$R/nitro_$1_$2.txt" | sed "s/^/[$2] /" | cut -c1-200; }
lb() { [ -x "$LB" ] || return; timeout 80 "$LB" -m "/dev/shm/$1.gguf" -ngl 99 -fa 1 -p 512 -n 128 -d 0,512,4096 -r 2 -o json > "$R/llama_$1_$2.json" 2> /dev/null
  python3 -c "
import json; d=json.load(open('$R/llama_$1_$2.json'))
print('[$2] MEASURED llama $1: ' + ', '.join('%s @ d%d %.1f' % ('pp%d' % r['n_prompt'] if r['n_prompt'] else 'tg%d' % r['n_gen'], r.get('n_depth', -1), r['avg_ts']) for r in d))"; }
for m in qwen3-30b-a3b gpt-oss-20b; do nb $m A; lb $m A; nb $m B; done
echo "side by side done at $(el)"
for m in qwen3-30b-a3b gpt-oss-20b; do
  timeout 60 "$B" "/dev/shm/$m.gguf" --no-kernels --pp 4096 --tg 16 --reps 2 > "$R/nitro_pp4096_$m.txt" 2>&1
  grep "GPU-all" "$R/nitro_pp4096_$m.txt" | head -1 | cut -c1-120
  [ -x "$LB" ] && timeout 60 "$LB" -m "/dev/shm/$m.gguf" -ngl 99 -fa 1 -p 4096 -n 0 -r 2 -o json > "$R/llama_pp4096_$m.json" 2> /dev/null &&
    python3 -c "import json; d=json.load(open('$R/llama_pp4096_$m.json')); print('MEASURED llama $m pp4096 %.1f tok/s' % d[0]['avg_ts'])"
done
echo "pp4096 done at $(el)"
timeout 40 "$B" /dev/shm/qwen3-30b-a3b.gguf --no-kernels --pp 16 --tg 64 --reps 1 --ops > "$R/ops_qwen3.txt" 2>&1
grep -A14 "by op" "$R/ops_qwen3.txt" | cut -c1-170
echo "end at $(el)"
