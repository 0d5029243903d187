#!/usr/bin/env bash
# device call F2 (after F1 on the same warm machine; nothing else running): GPU-all decode at L2
# prefetch levels 3 (all), 0 (none), 2 (weights + K/V), 1 (weights) and llama.cpp, mirrored, on both
# synthetic models; the op profile of qwen3's step at levels 3 and 0.
set -uo pipefail
T0=$(date +%s); el() { echo "$(( $(date +%s) - T0 )) s"; }
HERE=$(pwd); W=/tmp/nitro-dev; L=/tmp/llama; R=/tmp/rF
export LD_LIBRARY_PATH="$W/bin" NITRO_SOURCE_DIR="$HERE"
B="$W/bin/nitro_cuda_bench"; LB=$L/b/bin/llama-bench
trap 'tar czf "$OUT/rF2.tgz" -C /tmp rF' EXIT
echo "load: $(cat /proc/loadavg)"; pgrep -fa "cmake --build" | head -2
nb() { [ $(( $(date +%s) - T0 )) -lt 480 ] || { echo "skip $1 $2 (time)"; return; }
       timeout 70 env NITRO_L2_PREFETCH=$3 "$B" "/dev/shm/$1.gguf" --no-kernels --depth 512,4096 --reps 3 > "$R/nitro_$1_$2.txt" 2>&1
       grep "GPU-all" "$R/nitro_$1_$2.txt" | sed "s/^/[$2 pf=$3] /" | cut -c1-230; }
lb() { [ -x "$LB" ] || return; [ $(( $(date +%s) - T0 )) -lt 440 ] || { echo "skip llama $1 (time)"; return; }; timeout 90 "$LB" -m "/dev/shm/$1.gguf" -ngl 99 -fa 1 -p 512 -n 128 -d 0,512,4096 -r 2 -o json > "$R/llama_$1_$2.json" 2> /dev/null
  python3 -c "
import json; d=json.load(open('$R/llama_$1_$2.json'))
print('[$2] MEASURED llama $1: ' + ', '.join('%s @ d%d %.1f' % ('pp%d' % r['n_prompt'] if r['n_prompt'] else 'tg%d' % r['n_gen'], r.get('n_depth', -1), r['avg_ts']) for r in d))"; }
q=qwen3-30b-a3b g=gpt-oss-20b
nb $q A 3; nb $q B 0; nb $g A 3; nb $g B 0; echo "round 1 at $(el)"
lb $q L; lb $g L; echo "llama at $(el)"
nb $q C 0; nb $q D 3; nb $g C 0; nb $g D 3; echo "round 2 at $(el)"
nb $q E 2; nb $q F 1; nb $g E 2; nb $g F 1; echo "round 3 at $(el)"
[ $(( $(date +%s) - T0 )) -lt 520 ] && timeout 30 env NITRO_L2_PREFETCH=3 "$B" /dev/shm/qwen3-30b-a3b.gguf --no-kernels --pp 16 --tg 64 --reps 1 --ops > "$R/ops_qwen3_pf3.txt" 2>&1
[ $(( $(date +%s) - T0 )) -lt 550 ] && timeout 30 env NITRO_L2_PREFETCH=0 "$B" /dev/shm/qwen3-30b-a3b.gguf --no-kernels --pp 16 --tg 64 --reps 1 --ops > "$R/ops_qwen3_pf0.txt" 2>&1
paste <(grep -A14 "by op" "$R/ops_qwen3_pf3.txt" | cut -c1-100) <(grep -A14 "by op" "$R/ops_qwen3_pf0.txt" | cut -c1-60)
echo "GPU done at $(el)"
