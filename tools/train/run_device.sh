#!/usr/bin/env bash
# The one device call that makes the embedded model: train (train.py), convert with nitro
# (nitro convert), split the GGUF for the trip back, evaluate with transformers (eval.py).
#   tools/train/run_device.sh CARRY OUT [TRAIN_SECONDS]
# CARRY holds train.u16, heldout.u16, tokens.json, tokenizer.json, chat_template.jinja and a
# nitro binary (+ libfmt.so.9); OUT receives run.log, train_log.json, config.json, eval.json,
# golden.json and model.gguf.part-aa/-ab... (rejoin with cat).
set -uo pipefail
C=$(realpath "$1"); O=$(realpath "$2"); BUDGET=${3:-270}
HERE=$(dirname "$(realpath "$0")")
export PYTHONUNBUFFERED=1 LD_LIBRARY_PATH="$C${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
LOG=$O/run.log
W=/tmp/nitro-train; rm -rf "$W"; mkdir -p "$W/hf"
{
  date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc
  python3 -c 'import torch, transformers, tokenizers, safetensors, numpy; print("torch", torch.__version__, "transformers", transformers.__version__, "tokenizers", tokenizers.__version__, "safetensors", safetensors.__version__, "numpy", numpy.__version__)'
} >> "$LOG" 2>&1
python3 "$HERE/train.py" --data "$C" --out "$W/hf" --time-budget "$BUDGET" >> "$LOG" 2>&1 || { echo "train failed" >> "$LOG"; exit 1; }
cp "$W/hf/train_log.json" "$W/hf/config.json" "$O/"
cp "$C/tokenizer.json" "$W/hf/"
"$C/nitro" convert "$W/hf" -o "$W/model.gguf" --name "nitro tiny-moe-pystd" --license PSF-2.0 \
    --chat-template "$C/chat_template.jinja" >> "$LOG" 2>&1 || { echo "convert failed" >> "$LOG"; exit 1; }
"$C/nitro" inspect "$W/model.gguf" >> "$LOG" 2>&1
sha256sum "$W/model.gguf" >> "$LOG"
(cd "$O" && split -b 15M "$W/model.gguf" model.gguf.part-)
python3 "$HERE/eval.py" --hf "$W/hf" --data "$C" --out "$O" --gguf "$W/model.gguf" >> "$LOG" 2>&1 || echo "eval failed" >> "$LOG"
date -u >> "$LOG"
tail -c 3000 "$LOG"
