#!/usr/bin/env bash
# The one device call that makes the trained routing traces (docs/bench.md, "Trained routing
# traces"): trains three small MoE models at the routing shapes of gpt-oss-20b, gpt-oss-120b and
# qwen3-30b-a3b and captures their routing over 8 held-out prompts (train_traces.py).
#   tools/train/run_traces_device.sh CARRY OUT [DEADLINE_S]
# CARRY is .carry/traces from make_trace_corpus.py (train.u16, heldout.u16, prompts.json,
# tokenizer.json, corpus.sha256). OUT receives run.log, traces.json and
# trace-{gpt-oss-20b,gpt-oss-120b,qwen3-30b-a3b}.jsonl.gz: 5 files, each well under 16 MiB.
# The whole run stays under 6 minutes: DEADLINE_S (default 300) bounds training and capture after
# Python's imports, and a hard timeout stops the Python process 30 s after it.
set -uo pipefail
C=$(realpath "$1"); O=$(realpath "$2"); DEADLINE=${3:-300}
HERE=$(dirname "$(realpath "$0")")
export PYTHONUNBUFFERED=1
LOG=$O/run.log
{
  date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc
  echo "corpus $(cat "$C/corpus.sha256")"
} >> "$LOG" 2>&1
timeout $((DEADLINE + 30)) python3 "$HERE/train_traces.py" --data "$C" --out "$O" --deadline "$DEADLINE" >> "$LOG" 2>&1 ||
    echo "train_traces.py failed or timed out (status $?)" >> "$LOG"
date -u >> "$LOG"
ls -l "$O" >> "$LOG"
tail -c 4000 "$LOG"
