#!/usr/bin/env bash
# `nitro serve --parallel N` on the lent GPU machine (issue 18): aggregate generated tok/s at 1, 4
# and 8 concurrent clients with --mode cpu, --mode gpu and --mode hybrid (one VRAM budget), on a
# synth gpt-oss-20b in /dev/shm (MXFP4 experts, as the real file). Each client count C runs a
# server with --parallel C (C = 1 is the one-request-at-a-time baseline), through
# bench/concurrency.sh and bench/concurrency_client.py.
#
#   bench/concurrency_device.sh OUT
#
# Reads the nitro binary from .carry/bin.tar.xz (bench/make_carry.sh after building build-cuda for
# sm_90), unpacked to /tmp/nitro-dev/bin as the other device scripts do. Writes to OUT:
# concurrency-{cpu,gpu,hybrid}.md (the MEASURED tables), serve-*.log (each server's log),
# summary.txt (aggregate tok/s per mode and client count, and the speed-up of 8 clients over 1).
# Sized to finish in about 4 minutes on a 16-core H200 machine (the synth takes ~1 min the first
# time); knobs (environment): MODES ("cpu gpu hybrid"), BUDGET (hybrid --vram-budget GiB, 8: about
# half of the experts resident), CLIENTS ("1 4 8"), REQUESTS (1), TOKENS (32), PROMPT_WORDS (24),
# THREADS (16), CTX (1024).
set -uo pipefail
OUT=${1:?usage: bench/concurrency_device.sh OUT}
mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
HERE=$(cd "$(dirname "$0")/.." && pwd)
W=/tmp/nitro-dev; mkdir -p "$W"
rm -rf "$W/bin"; tar xJf "$HERE/.carry/bin.tar.xz" -C "$W" || { echo "error: no .carry/bin.tar.xz (bench/make_carry.sh)"; exit 2; }
export LD_LIBRARY_PATH="$W/bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export NITRO="$W/bin/nitro"
MODES=${MODES:-"cpu gpu hybrid"}
BUDGET=${BUDGET:-8}
export CLIENTS=${CLIENTS:-"1 4 8"} REQUESTS=${REQUESTS:-1} TOKENS=${TOKENS:-32} PROMPT_WORDS=${PROMPT_WORDS:-24}
export THREADS=${THREADS:-16} CTX=${CTX:-1024} BASELINE=0 OUT
log() { echo "[$(date -u +%H:%M:%S)] $*"; }

M=/dev/shm/gpt-oss-20b.gguf
if [ "$(cat "$M.key" 2>/dev/null)" != "mxfp4" ]; then
    rm -f "$M" "$M.key"
    log "synth gpt-oss:gpt-oss-20b (MXFP4 experts) -> $M"
    "$NITRO" synth --arch gpt-oss --preset gpt-oss-20b --type mxfp4 -o "$M" > "$OUT/synth.log" 2>&1 \
        || { echo "error: synth failed (see $OUT/synth.log)"; exit 1; }
    echo mxfp4 > "$M.key"
fi
{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc; "$NITRO" --version; } > "$OUT/env.txt" 2>&1

for mode in $MODES; do
    extra=""
    label=$mode
    if [ "$mode" = hybrid ]; then extra="--vram-budget $BUDGET"; label="hybrid-${BUDGET}gib"; fi
    log "mode $mode $extra: clients $CLIENTS"
    EXTRA="$extra" LABEL="$label" timeout 150 bash "$HERE/bench/concurrency.sh" "$M" "$mode" > /dev/null 2> "$OUT/concurrency-$label.err"
    rc=$?
    [ $rc -eq 0 ] || echo "mode $mode: bench/concurrency.sh rc=$rc (124: over its 150 s; see $OUT/concurrency-$label.err)"
done

# Summary: aggregate tok/s (the tables' 6th column) per client count, and 8 clients over 1.
{
    echo "MEASURED aggregate generated tok/s of nitro serve --parallel C with C clients ($REQUESTS request(s) of $TOKENS tokens each per client), synth gpt-oss-20b, -t $THREADS:"
    for f in "$OUT"/concurrency-*.md; do
        [ -f "$f" ] || continue
        label=$(basename "$f" .md); label=${label#concurrency-}
        awk -F'|' -v label="$label" '
            /^\| [0-9]/ { c = $2 + 0; gsub(/ /, "", $7); agg[c] = $7; order[++n] = c }
            END {
                line = sprintf("%-16s", label)
                for (i = 1; i <= n; i++) line = line sprintf("  %d clients: %s tok/s", order[i], agg[order[i]])
                if ((1 in agg) && (8 in agg) && agg[1] + 0 > 0) line = line sprintf("  (8 vs 1: %.2fx)", agg[8] / agg[1])
                print line
            }' "$f"
    done
} | tee "$OUT/summary.txt"
