#!/usr/bin/env bash
# Aggregate generated tok/s and TTFT of `nitro serve` at 1, 4 and 8 concurrent clients (issue 18).
#
#   bench/concurrency.sh MODEL [MODE]        MODE: cpu (default), gpu, hybrid, auto
#
# For each client count C it starts `nitro serve --parallel 1` (one request at a time: the
# baseline; BASELINE=0 skips it for C > 1) and, for C > 1, `nitro serve --parallel C` (continuous
# batching: every mode, cpu, gpu and hybrid, batches the decode steps of C requests), lets C
# clients (bench/concurrency_client.py, python3 standard library only) each send REQUESTS
# streaming /v1/completions requests of exactly TOKENS generated tokens (ignore_eos, temperature
# 0), and prints a Markdown table labelled MEASURED (also written to $OUT/concurrency-MODE.md when
# OUT is set). A server that refuses to start is reported as refused, with its message.
#
# Environment: NITRO (the nitro binary; default build/nitro beside this script), CLIENTS ("1 4 8"),
# REQUESTS (2), TOKENS (64), PROMPT_WORDS (40), THREADS (-t; 0 = all cores), CTX (-c, 2048),
# UBATCH (-u, 512), EXTRA (more serve flags, e.g. "--vram-budget 8"), PYTHON (python3), BASELINE (1),
# OUT (a directory for the table; none by default), LABEL (the table file's name, default MODE).
set -uo pipefail
MODEL=${1:?usage: bench/concurrency.sh MODEL [MODE]}
MODE=${2:-cpu}
HERE=$(cd "$(dirname "$0")" && pwd)
NITRO=${NITRO:-$HERE/../build/nitro}
CLIENTS=${CLIENTS:-"1 4 8"}
REQUESTS=${REQUESTS:-2}
TOKENS=${TOKENS:-64}
PROMPT_WORDS=${PROMPT_WORDS:-40}
THREADS=${THREADS:-0}
CTX=${CTX:-2048}
UBATCH=${UBATCH:-512}
EXTRA=${EXTRA:-}
PYTHON=${PYTHON:-python3}
BASELINE=${BASELINE:-1}
OUT=${OUT:-}
LABEL=${LABEL:-$MODE}
[ -x "$NITRO" ] || { echo "error: NITRO=$NITRO is not an executable nitro binary" >&2; exit 2; }
[ -f "$MODEL" ] || { echo "error: model $MODEL not found" >&2; exit 2; }
TMP=$(mktemp -d)
SERVER_PID=
cleanup() { [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null; rm -rf "$TMP"; }
trap cleanup EXIT

# start_server PARALLEL: sets URL and SERVER_PID, or returns 1 (the log is in $TMP/serve.log).
start_server() {
    # shellcheck disable=SC2086
    "$NITRO" serve -m "$MODEL" --mode "$MODE" --host 127.0.0.1 --port 0 -t "$THREADS" -c "$CTX" -u "$UBATCH" \
        --parallel "$1" $EXTRA 2> "$TMP/serve.log" > /dev/null &
    SERVER_PID=$!
    for _ in $(seq 1 1200); do
        URL=$(grep -oE 'listening on http://127\.0\.0\.1:[0-9]+' "$TMP/serve.log" | head -1 | sed 's/listening on //')
        [ -n "$URL" ] && return 0
        kill -0 "$SERVER_PID" 2>/dev/null || { wait "$SERVER_PID" 2>/dev/null; SERVER_PID=; return 1; }
        sleep 0.1
    done
    echo "error: nitro serve did not start in 120 s" >&2
    return 1
}
stop_server() { kill -TERM "$SERVER_PID" 2>/dev/null; wait "$SERVER_PID" 2>/dev/null; SERVER_PID=; }

N_LAYER=
ROWS=()
run_one() {  # run_one CLIENTS PARALLEL
    local c=$1 p=$2
    keep_log() { [ -n "$OUT" ] && mkdir -p "$OUT" && cp "$TMP/serve.log" "$OUT/serve-$LABEL-c$c-p$p.log"; }
    if ! start_server "$p"; then
        keep_log
        ROWS+=("| $c | $p | refused: $(grep -m1 -iE 'error' "$TMP/serve.log" | tr '|' '/') | | | | | | | | |")
        return
    fi
    [ -n "$N_LAYER" ] || N_LAYER=$(grep -oE '[0-9]+ layers' "$TMP/serve.log" | head -1 | cut -d' ' -f1)
    [ -n "${PLACEMENT:-}" ] || PLACEMENT=$(grep -m1 '^placement' "$TMP/serve.log" | sed 's/^placement *//')
    local row
    if ! row=$("$PYTHON" "$HERE/concurrency_client.py" --url "$URL" --clients "$c" --requests "$REQUESTS" \
                 --tokens "$TOKENS" --prompt-words "$PROMPT_WORDS" --table-row "$p" --n-layer "${N_LAYER:-0}"); then
        row="| $c | $p | client failed | | | | | | | | |"
    fi
    stop_server
    keep_log
    ROWS+=("$row")
}

for c in $CLIENTS; do
    { [ "$c" -eq 1 ] || [ "$BASELINE" = 1 ]; } && run_one "$c" 1
    [ "$c" -gt 1 ] && run_one "$c" "$c"
done

report() {
echo "MEASURED: nitro serve --mode $MODE on $(nproc) CPU core(s) ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'))$(command -v nvidia-smi > /dev/null && echo ", GPU $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)")"
echo "model $MODEL; placement: ${PLACEMENT:-?}"
echo "-t $THREADS, -c $CTX, -u $UBATCH $EXTRA; $REQUESTS request(s) per client, max_tokens $TOKENS (ignore_eos), prompts of ~$PROMPT_WORDS words, temperature 0"
echo "load average (1, 5, 15 min): $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| clients | --parallel | requests | tokens | wall s | aggregate tok/s | per-request decode tok/s | TTFT mean ms | TTFT max ms | decode rows per step | distinct experts per layer per decode step | expert MiB read per token |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
printf '%s\n' "${ROWS[@]}"
}
if [ -n "$OUT" ]; then mkdir -p "$OUT" && report | tee "$OUT/concurrency-$LABEL.md"; else report; fi
