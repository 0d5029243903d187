#!/usr/bin/env bash
# Sets up (installs dependencies, builds) and runs the main job.
#   bash scripts/run.sh              # the default model
#   bash scripts/run.sh MODEL.gguf   # your model
# Until the embedded default model exists the main job is `nitro inspect`; without a MODEL it
# first writes a tiny synthetic gpt-oss model with `nitro synth`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
model="${1:-}"
if [ -z "$model" ]; then
    model=build/tiny-gptoss.gguf
    ./build/nitro synth --arch gpt-oss --preset tiny -o "$model"
fi
./build/nitro inspect "$model"
