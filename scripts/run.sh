#!/usr/bin/env bash
# Sets up (installs dependencies, builds) and runs the main job: `nitro run`. On a machine with an
# NVIDIA GPU and nvcc >= 12 the build includes the CUDA backend for that GPU (scripts/setup.sh;
# NITRO_CUDA=0 or 1 forces either way), and `nitro run` then uses the GPU (--mode auto).
#   bash scripts/run.sh                          # the embedded default model, a default prompt
#   bash scripts/run.sh -m MODEL.gguf -p "TEXT"  # any `nitro run` options
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [ $# -eq 0 ]; then
    set -- -p "def read_config(path):" -n 64
fi
exec ./build/nitro run "$@"
