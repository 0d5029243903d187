#!/usr/bin/env bash
# device call F3 (after F1/F2 on the same warm machine; nothing else running): the CPU expert
# kernel tables of bench/cpu_kernels_device.sh (PARTS=kernels: every type x ISA level the Xeon has
# x 1/4/16 tokens against the read probe), on the synthetic models F1 wrote.
set -uo pipefail
T0=$(date +%s); el() { echo "$(( $(date +%s) - T0 )) s"; }
W=/tmp/nitro-dev; R=/tmp/rF
trap 'tar czf "$OUT/rF3.tgz" -C /tmp rF' EXIT
echo "load: $(cat /proc/loadavg)"
M=/dev/shm/m; mkdir -p $M; ln -sf /dev/shm/gpt-oss-20b.gguf $M/gpt-oss-gpt-oss-20b.gguf; ln -sf /dev/shm/qwen3-30b-a3b.gguf $M/qwen3moe-qwen3-30b-a3b-q4_k.gguf
LD_LIBRARY_PATH="$W/cpu" PARTS=${PARTS:-kernels} SWEEP=none QWEN_TYPE=q4_k MODELS_DIR=$M timeout 560 bash bench/cpu_kernels_device.sh "$W/cpu" "$R/cpuk"
echo "cpu kernels rc=$? end at $(el)"
