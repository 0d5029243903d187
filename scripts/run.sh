#!/usr/bin/env bash
# Sets up (installs dependencies, builds) and runs the main job: `nitro run`.
#   bash scripts/run.sh                          # the embedded default model, a default prompt
#   bash scripts/run.sh -m MODEL.gguf -p "TEXT"  # any `nitro run` options
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [ $# -eq 0 ]; then
    set -- -p "def read_config(path):" -n 64
fi
exec ./build/nitro run "$@"
