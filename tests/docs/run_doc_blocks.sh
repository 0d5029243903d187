#!/usr/bin/env bash
# Runs every command block of the README and the docs (test `docs_command_blocks`), so a command a
# user copies from them works with the nitro that was built.
#
# A command block is a fenced block tagged bash, sh or shell. Each runs on its own, in order, as
# `bash -eo pipefail`, with stdin from /dev/null, in a fresh temporary folder laid out like a
# checkout after `scripts/run.sh`: build/nitro is NITRO_BINARY, models/ is the checkout's, and
# `nitro` is on PATH. A block fails the test when it exits non-zero or runs past DOC_TEST_TIMEOUT
# seconds (default 120).
#
# An HTML comment on the last non-blank line before the fence marks a block that is not run here:
#   <!-- doc-test: gpu -->            needs an NVIDIA GPU (and the CUDA build)
#   <!-- doc-test: large-model -->    needs a real model file (gigabytes) that CI does not have
#   <!-- doc-test: network -->        needs the network (Hugging Face)
#   <!-- doc-test: skip (REASON) -->  anything else; the reason is required (e.g. it installs
#                                     packages or builds: CI runs scripts/run.sh through .ci/run)
# and one that is run with a server beside it:
#   <!-- doc-test: server -->         `nitro serve` on the embedded model is started first on a
#                                     free port; 127.0.0.1:8080 in the block means that port
# Where the line before a block cannot hold the mark (the README's first block, whose first lines
# CI relies on), the mark may stand on the line right after the closing fence instead.
# Any other doc-test comment is an error, so a typo cannot skip a block silently.
#
# Usage: run_doc_blocks.sh [--list] [FILE.md ...]   (default: README.md docs/*.md of this checkout)
# Environment: NITRO_BINARY (default build/nitro), DOC_TEST_TIMEOUT (seconds per block, 120).
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
list=0
if [ "${1:-}" = --list ]; then list=1; shift; fi
if [ $# -eq 0 ]; then set -- "$root/README.md" "$root"/docs/*.md; fi
nitro="${NITRO_BINARY:-$root/build/nitro}"
limit="${DOC_TEST_TIMEOUT:-120}"
if [ "$list" = 0 ] && [ ! -x "$nitro" ]; then
    echo "run_doc_blocks: FAIL: no nitro binary at $nitro (set NITRO_BINARY)" >&2; exit 1
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/nitro-doc-blocks-XXXXXX")"
server_pid=""
cleanup() {
    if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null; wait "$server_pid" 2>/dev/null; fi
    rm -rf "$work"
}
trap cleanup EXIT

# One record per block: FILE, LINE, MARK (run, server, gpu, ...; "bad:TEXT" for an unknown mark),
# then the block's text, each record ended by a NUL.
extract() {  # $1 file
    awk -v file="$1" '
        function mark_of(line,   m) {
            if (line !~ /^[ \t]*<!--[ \t]*doc-test:/) return ""
            m = line
            sub(/^[ \t]*<!--[ \t]*doc-test:[ \t]*/, "", m); sub(/[ \t]*-->[ \t]*$/, "", m)
            if (m == "gpu" || m == "large-model" || m == "network" || m == "server") return m
            if (m ~ /^skip \([^)]+\)$/) return m
            return "bad:" m
        }
        function emit() {
            if (pending) printf "%s\t%d\t%s\n%s%c", file, pstart, pmark, pbody, 0
            pending = 0
        }
        pending && !inb {
            # the line right after a closing fence may carry the mark of the block before it
            m = mark_of($0)
            if (m != "" && pmark == "run") { pmark = m; emit(); prev = ""; next }
            emit()
        }
        /^```/ {
            if (!inb) {
                lang = substr($0, 4); sub(/[ \t].*$/, "", lang)
                inb = 1; start = NR; body = ""
                runnable = (lang == "bash" || lang == "sh" || lang == "shell")
                mark = mark_of(prev); if (mark == "") mark = "run"
                next
            }
            inb = 0
            if (runnable) { pending = 1; pstart = start; pmark = mark; pbody = body }
            prev = ""
            next
        }
        inb { body = body $0 "\n"; next }
        /[^ \t]/ { prev = $0 }
        END { emit() }
    ' "$1"
}

# The folder a block runs in: a checkout after scripts/run.sh, as far as the docs assume one.
mkdir -p "$work/bin" "$work/run"
ln -s "$nitro" "$work/bin/nitro"

start_server() {
    [ -n "$server_pid" ] && return 0
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null \
           || echo $((20000 + RANDOM % 20000)))
    "$nitro" serve --host 127.0.0.1 --port "$port" -t 2 > "$work/server.log" 2>&1 &
    server_pid=$!
    for _ in $(seq 1 600); do
        curl -sf "http://127.0.0.1:$port/health" > /dev/null 2>&1 && return 0
        kill -0 "$server_pid" 2>/dev/null || break
        sleep 0.1
    done
    echo "run_doc_blocks: FAIL: nitro serve did not start:" >&2; cat "$work/server.log" >&2
    return 1
}

ran=0; skipped=0; failed=0
for f in "$@"; do
    rel="${f#"$root"/}"
    while IFS= read -r -d '' rec; do
        header="${rec%%$'\n'*}"; body="${rec#*$'\n'}"
        IFS=$'\t' read -r _ line mark <<< "$header"
        where="$rel:$line"
        case "$mark" in
            bad:*) echo "FAIL  $where: unknown mark <!-- doc-test: ${mark#bad:} --> (gpu, large-model, network, server, skip (REASON))"
                   failed=$((failed + 1)); continue ;;
            run|server) ;;
            *) echo "skip  $where ($mark)"; skipped=$((skipped + 1)); continue ;;
        esac
        if [ "$list" = 1 ]; then echo "run   $where ($mark)"; continue; fi
        if [ "$mark" = server ]; then
            start_server || { failed=$((failed + 1)); continue; }
            body="${body//127.0.0.1:8080/127.0.0.1:$port}"
        fi
        dir="$work/run/$ran"; mkdir -p "$dir/build"
        ln -s "$nitro" "$dir/build/nitro"; ln -s "$root/models" "$dir/models"
        t0=$(date +%s.%N)
        # curl fails the block on an HTTP error answer (the block's text is what a user types)
        prelude='curl() { command curl --fail-with-body -sS "$@"; }'
        (cd "$dir" && PATH="$work/bin:$PATH" timeout -k 5 "$limit" bash -eo pipefail -c "$prelude"$'\n'"$body" \
            < /dev/null > "$dir.out" 2>&1)
        rc=$?
        secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
        ran=$((ran + 1))
        if [ $rc -eq 0 ]; then
            echo "ok    $where (${secs} s)"
        else
            [ $rc -eq 124 ] && why="timed out after $limit s" || why="exit status $rc"
            echo "FAIL  $where: $why; the block:"; sed 's/^/    | /' <<< "$body"
            echo "  its output (last 30 lines):"; tail -n 30 "$dir.out" | sed 's/^/    > /'
            failed=$((failed + 1))
        fi
    done < <(extract "$f")
done
echo "run_doc_blocks: $ran run, $skipped marked not to run here, $failed failed"
[ $failed -eq 0 ]
