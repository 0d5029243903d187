#!/usr/bin/env bash
# A restructuring that must not change arithmetic or speed, checked on the lent GPU machine
# (docs/architecture.md, "Checking a restructuring"): the old and the new build side by side.
#   dev/refactor_device.sh parity OUT   logits of old and new byte for byte (dev/compare_logits.sh)
#                                       at GPU-all and hybrid 10% / 50% (frozen residency) on tiny
#                                       synth models of every architecture and several types
#   dev/refactor_device.sh cuda-tests OUT   the new build's CUDA tests (about 9.5 minutes on an H100
#                                       on 2026-12-08: a call of its own)
#   dev/refactor_device.sh speed-g120 OUT   old and new `nitro run --json`, mirrored A B B A:
#                                       gpt-oss-120b synth at 12 GiB hybrid (decode, 4,096-token prompt)
#   dev/refactor_device.sh speed-q30 OUT    the same for qwen3-30b-a3b synth (Q4_K) GPU-all decode
# Inputs (git-ignored, made on the development machine by dev/refactor_carry.sh):
#   .carry/old.tar.xz  old/{nitro,nitro_logits_dump} + libraries   (the build before the change)
#   .carry/new.tar.xz  new/{nitro,nitro_logits_dump,nitro_cuda_tests} + libraries
#   .carry/shared.tar.xz  (optional) fixtures/ and golden/ of ../shared, which does not travel: the
#                         CUDA tests read them (NITRO_SHARED_DIR)
set -uo pipefail
PHASE=${1:?phase}; RESULTS=${2:?out dir}
HERE=$(cd "$(dirname "$0")/.." && pwd)
W=/tmp/nitro-refactor; mkdir -p "$W"
for v in old new; do [ -x "$W/$v/nitro" ] || tar xJf "$HERE/.carry/$v.tar.xz" -C "$W"; done
OLD=$W/old; NEW=$W/new
if [ -f "$HERE/.carry/shared.tar.xz" ]; then
    mkdir -p "$W/shared"; [ -d "$W/shared/fixtures" ] || tar xJf "$HERE/.carry/shared.tar.xz" -C "$W/shared"
    export NITRO_SHARED_DIR=$W/shared
fi
export NITRO_SOURCE_DIR=$HERE
run_old() { LD_LIBRARY_PATH="$OLD" "$@"; }
run_new() { LD_LIBRARY_PATH="$NEW" "$@"; }
log() { echo "[$(date -u +%H:%M:%S)] $*"; }
{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc; } | tee "$RESULTS/env-$PHASE.txt"

case "$PHASE" in
parity)
    M=$W/models; mkdir -p "$M"
    # Tiny models of every architecture, written by the old build (the same bytes for both).
    while read -r name args; do
        [ -f "$M/$name.gguf" ] || run_old "$OLD/nitro" synth $args -o "$M/$name.gguf" > /dev/null 2>&1 || echo "synth $name failed"
    done <<'EOF'
gptoss-tiny --arch gpt-oss --preset tiny
gptoss-tiny-q4k --arch gpt-oss --preset tiny --type q4_k
qwen3moe-tiny --arch qwen3moe --preset tiny
qwen3moe-tiny-iq4xs --arch qwen3moe --preset tiny --type iq4_xs
qwen3next-tiny --arch qwen3next --preset tiny
qwen3next-tiny-q5k --arch qwen3next --preset tiny --type q5_k
qwen35moe-tiny-q6k --arch qwen35moe --preset tiny --type q6_k
EOF
    log "logits, old vs new"
    export LD_LIBRARY_PATH="$NEW"
    bash "$HERE/dev/compare_logits.sh" "$OLD/nitro_logits_dump" "$NEW/nitro_logits_dump" "gpu hybrid:0.1 hybrid:0.5" "$M"/*.gguf \
        2>&1 | tee "$RESULTS/logits.txt"
    echo "compare rc=${PIPESTATUS[0]}"
    ;;
cuda-tests)
    log "cuda tests (new build)"
    run_new "$NEW/nitro_cuda_tests" --gtest_color=no > "$RESULTS/cuda_tests.log" 2>&1; echo "cuda tests rc=$?"
    grep -E "^\[  (FAILED|PASSED) |FAILED" "$RESULTS/cuda_tests.log" | tail -30
    ;;
speed-g120|speed-q30)
    # Two calls (each within the 10-minute limit of one call; /dev/shm stays while the machine is warm).
    G=/dev/shm/g120.gguf Q=/dev/shm/q30.gguf
    PROMPT64=$(seq -s, 100 163)
    PROMPT4K=$(seq -s, 1000 5095)
    one() {  # label binary-dir args...: one `nitro run --json` line, tagged
        local tag=$1 dir=$2; shift 2
        local out
        out=$(LD_LIBRARY_PATH="$dir" "$dir/nitro" run --json --ignore-eos -t 16 "$@" 2> "$W/err.txt") || { echo "{\"run\":\"$tag\",\"error\":true}"; tail -3 "$W/err.txt"; return; }
        echo "$out" | python3 -c "import json,sys; j=json.load(sys.stdin); t=j.get('timings',j); print(json.dumps({'run':'$tag', **{k:v for k,v in t.items() if isinstance(v,(int,float))}}))"
    }
    if [ "$PHASE" = speed-g120 ]; then
        [ -f "$G" ] || { log "synth gpt-oss-120b"; run_new "$NEW/nitro" synth --preset gpt-oss-120b -o "$G" > /dev/null 2>&1; }
        for step in old new new old; do
            dir=$OLD; [ "$step" = new ] && dir=$NEW
            log "$step: gpt-oss-120b hybrid 12 GiB decode"
            one "$step g120-hybrid12-decode" "$dir" -m "$G" --mode hybrid --vram-budget 12 --prompt-ids "$PROMPT64" -n 128 | tee -a "$RESULTS/speed.jsonl"
            log "$step: gpt-oss-120b hybrid 12 GiB 4096-token prompt"
            one "$step g120-hybrid12-prompt4096" "$dir" -m "$G" --mode hybrid --vram-budget 12 -u 4096 -c 8192 --prompt-ids "$PROMPT4K" -n 1 | tee -a "$RESULTS/speed.jsonl"
        done
    else
        [ -f "$Q" ] || { log "synth qwen3-30b-a3b"; run_new "$NEW/nitro" synth --preset qwen3-30b-a3b --type q4_k -o "$Q" > /dev/null 2>&1; }
        for step in old new new old; do
            dir=$OLD; [ "$step" = new ] && dir=$NEW
            log "$step: qwen3-30b-a3b GPU-all decode"
            one "$step q30-gpu-decode" "$dir" -m "$Q" --mode gpu --prompt-ids "$PROMPT64" -n 128 | tee -a "$RESULTS/speed.jsonl"
        done
    fi
    ;;
*) echo "unknown phase $PHASE"; exit 2 ;;
esac
