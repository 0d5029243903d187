#!/usr/bin/env bash
# device call 2 (stop 33): gpt-oss-120b synth at 12 GiB against llama-bench -ncmoe 31 (ubatch 512
# for 512 tokens, 4096 above: 2048 lost by 1.6-1.9x in the earlier calls), mirrored, nitro with
# its defaults (--prefill-pin auto); then nitro with --prefill-pin 0 at 4,096 (the ring only).
set -uo pipefail
R="$OUT/r"; mkdir -p "$R"
export LD_LIBRARY_PATH=/tmp/nitro-dev/bin
[ -f /dev/shm/bench.gguf ] || { echo "no gpt-oss model"; exit 1; }
free -g | head -2
PROMPTS=512,4096,13000 LLAMA_UB=4096 CPU_BASELINE=0 MIRROR=1 timeout 430 bash bench/prefill_device.sh bench "$R" 2>&1 | grep -v "^\["
VARIANTS='pin0_4096|4096|16|4096|--prefill-pin 0' MAXP=13000 \
    timeout 60 bash bench/prefill_device.sh sweep "$R" 2>&1 | grep -E "MEASURED|pinned|warning"
