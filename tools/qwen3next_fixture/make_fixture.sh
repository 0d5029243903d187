#!/usr/bin/env bash
# Makes tests/data/qwen3next/ from the output of ../shared/tools/build_qwen3next_hf.py (run on the GPU
# machine: transformers builds a tiny random Qwen3NextForCausalLM, llama.cpp's convert_hf_to_gguf.py
# converts it to F16):
#   1. quantizes the F16 GGUF with llama.cpp's own quantizer (llama_quantize.cpp: node-llama-cpp's
#      prebuilt libllama, 80fb11a): Q8_0 weights, Q4_0 token_embd and output (~18 MB);
#   2. records llama.cpp goldens on it with the live peer (record_goldens.mjs);
#   3. copies transformers' float32 reference (for the F16 file) beside them.
# usage: tools/qwen3next_fixture/make_fixture.sh SRC_DIR   (SRC_DIR holds tiny-qwen3next-f16.gguf and
#        tiny-qwen3next.transformers.json; needs build/llama-peer from scripts/setup.sh)
set -euo pipefail
SRC=${1:?folder with tiny-qwen3next-f16.gguf}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT="$ROOT/tests/data/qwen3next"
LP="$ROOT/build/llama-peer"
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
g++ -std=c++17 -O1 -I"$ROOT/build/llama-peer-src/include" -I"$ROOT/build/llama-peer-src/ggml/include" \
    "$ROOT/tools/qwen3next_fixture/llama_quantize.cpp" -o "$TMP/llama_quantize" \
    -L"$LP" -l:libllama.v0.4.0.so -l:libggml.v0.4.0.so -l:libggml-base.so -Wl,-rpath,"$LP"
mkdir -p "$OUT"
"$TMP/llama_quantize" "$SRC/tiny-qwen3next-f16.gguf" "$OUT/tiny-qwen3next-q8.gguf" > "$TMP/quantize.log" 2>&1 \
    || { cat "$TMP/quantize.log"; exit 1; }
node "$ROOT/tools/qwen3next_fixture/record_goldens.mjs" "$OUT/tiny-qwen3next-q8.gguf" "$SRC/tiny-qwen3next.transformers.json" \
    "${NITRO_SHARED_DIR:-$ROOT/../shared}/fixtures/tiny-qwen3moe-q8.golden.json" "$OUT/tiny-qwen3next-q8.golden.json" 32
cp "$SRC/tiny-qwen3next.transformers.json" "$OUT/"
(cd "$OUT" && sha256sum tiny-qwen3next-q8.gguf tiny-qwen3next-q8.golden.json tiny-qwen3next.transformers.json)
