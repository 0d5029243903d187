#!/usr/bin/env bash
# device call 6 (stop 34, fresh machine): tests of the chunks-in-flight knob and the learned CPU scale
# while llama-bench builds and the synth models are written; then, nothing else running: GPU-all
# decode with NITRO_MMVQ_CHUNKS 0 (default), 2, 4, side by side with llama.cpp; the cost model on
# qwen3-30b-a3b hybrid at 10.5 GiB (auto with the learned CPU scale vs stage).
set -uo pipefail
T0=$(date +%s); el() { echo "$(( $(date +%s) - T0 )) s"; }
HERE=$(pwd); W=/tmp/nitro-dev; rm -rf "$W/bin"; mkdir -p "$W"; tar xJf .carry/bin.tar.xz -C "$W"
export LD_LIBRARY_PATH="$W/bin" NITRO_SOURCE_DIR="$HERE"
N="$W/bin/nitro"; LB=/tmp/llama/b/bin/llama-bench; R=/tmp/r6; rm -rf "$R"; mkdir -p "$R"; trap 'cp -r /tmp/nitro-out/sweep "$R/" 2>/dev/null; tar czf "$OUT/r6.tgz" -C /tmp r6' EXIT
{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc; "$N" --version | head -1; } | tee "$R/env.txt"
L=/tmp/llama
building() { pgrep -f "cmake --build b" > /dev/null; }
if [ ! -x "$LB" ] && ! building; then  # call 6a's detached build did not survive: go on from its objects
    echo "restarting the llama-bench build"
    ( cd "$L" && cmake --build b -j14 --target llama-bench >> /tmp/llama_build.log 2>&1 ) &
fi
timeout 230 "$W/bin/nitro_cuda_tests" --gtest_color=no --gtest_filter='CudaOps.MmvqChunks*:CudaOps.FusedDecodeMoe*:CudaOps.MatmulPrompt*:CudaHybrid.PromptPathsMatchCpu:CudaQwen3Next.*:CudaModel.SynthModelsOfEveryExpertTypeMatchCpu' > "$R/t.log" 2>&1; echo "tests rc=$? at $(el)"
grep -E "^\[  FAILED|^\[       OK|Failure|^\[  PASSED|tests ran" "$R/t.log" | head -30
"$N" synth --arch gpt-oss --preset gpt-oss-20b -o /dev/shm/gpt-oss-20b.gguf > "$R/synth20.log" 2>&1; echo "synth 20b rc=$? at $(el)"
"$N" synth --arch qwen3moe --preset qwen3-30b-a3b --type q4_k -o /dev/shm/qwen3-30b-a3b.gguf > "$R/synth30.log" 2>&1; echo "synth 30b rc=$? at $(el)"
while [ ! -x "$LB" ] && [ $(( $(date +%s) - T0 )) -lt 330 ]; do sleep 3; done
while building && [ $(( $(date +%s) - T0 )) -lt 330 ]; do sleep 2; done
tail -2 /tmp/llama_build.log; ls -la "$LB"; echo "build wait over at $(el)"
# --- timed, nothing else running ---
P512=$(python3 -c "print(','.join(str(100 + (i * 7919) % 150000) for i in range(512)))")
nb() { for i in 1 2; do NITRO_MMVQ_CHUNKS=$3 "$N" run -m "/dev/shm/$1.gguf" --mode gpu --prompt-ids "$P512" -n 128 --ignore-eos -c 1024 --json > "$R/nitro_$1_c$3_$2_$i.json" 2> /dev/null
       python3 -c "import json; t=json.load(open('$R/nitro_$1_c$3_$2_$i.json'))['timings']; print('[$2 chunks=$3] MEASURED nitro $1 GPU-all: pp512 %.1f tok/s, tg128 %.1f tok/s' % (t['prompt_tok_s'], t['decode_tok_s']))"; done; }
lb() { [ -x "$LB" ] || return; "$LB" -m "/dev/shm/$1.gguf" -ngl 99 -fa 1 -t 16 -p 512 -n 128 -r 2 -o json > "$R/llama_$1_$2.json" 2> /dev/null
  python3 -c "
import json; d=json.load(open('$R/llama_$1_$2.json'))
for r in d: print('[$2] MEASURED llama $1: %s %.1f tok/s' % ('pp%d' % r['n_prompt'] if r['n_prompt'] else 'tg%d' % r['n_gen'], r['avg_ts']))"; }
for m in gpt-oss-20b qwen3-30b-a3b; do
  nb $m A 0; nb $m A 2; nb $m A 4; lb $m A; lb $m B; nb $m B 4; nb $m B 2; nb $m B 0
done
echo "side by side done at $(el)"
rm -f .carry/bin.tar.xz
MODEL=/dev/shm/qwen3-30b-a3b.gguf BUDGET=10.5 MAXP=13000 VARIANTS='q30auto_4096|4096|16|4096|;q30stage_4096|4096|16|4096|--prefill-cost-model stage;q30auto_13000|13000|16|4096|;q30stage_13000|13000|16|4096|--prefill-cost-model stage;q30autoB_13000|13000|16|4096|;q30autoB_4096|4096|16|4096|' \
    timeout 150 bash bench/prefill_device.sh sweep "$R" 2>&1 | grep -E "^MEASURED" | cut -c1-330
echo "sweep done at $(el)"
for f in /tmp/nitro-out/sweep/nitro_q30auto*.err; do echo "== $f"; grep "CPU model x" "$f" | sed -n '1p;2p;5p;20p;$p' | sed 's/.*layer/layer/' | cut -c1-200; done
