#!/usr/bin/env bash
# CPU engine vs llama.cpp, side by side on the same synthetic gpt-oss-20b GGUF, same threads,
# same prompt length and generated tokens; alternating runs so both see the same machine noise.
# Prints MEASURED tok/s of each and the ratio nitro / llama.cpp, plus nitro's memory read
# bandwidth and expert GEMV GB/s (nitro bench).
#   bash bench/cpu_vs_llamacpp.sh [--peer auto|node|cpp] [MODEL.gguf] [THREADS] [N_PROMPT] [N_GEN] [REPS]
# The llama.cpp side (docs/peer.md): `node` runs tools/peer/llama_bench.mjs (node-llama-cpp);
# `cpp` runs build/llama-peer/llama_cpp_bench (the same prebuilt llama.cpp, no node; another
# location with LLAMA_CPP_BENCH=PATH). `auto` (default): node when node and the npm packages are
# installed, else the C++ peer.
set -euo pipefail
cd "$(dirname "$0")/.."
peer=auto
if [ "${1:-}" = "--peer" ]; then peer="${2:?--peer needs auto, node or cpp}"; shift 2; fi
model="${1:-/tmp/nitro-bench-gpt-oss-20b.gguf}"
threads="${2:-$(nproc)}"
n_prompt="${3:-64}"
n_gen="${4:-16}"
reps="${5:-2}"
cpp_peer="${LLAMA_CPP_BENCH:-./build/llama-peer/llama_cpp_bench}"
if [ "$peer" = auto ]; then
    if command -v node >/dev/null && [ -d tools/peer/node_modules/node-llama-cpp ]; then peer=node; else peer=cpp; fi
fi
case "$peer" in
    node) llama_cmd=(node tools/peer/llama_bench.mjs) ;;
    cpp)  [ -x "$cpp_peer" ] || { echo "bench: $cpp_peer not found (build it: cmake --build build --target llama_cpp_bench)" >&2; exit 1; }
          llama_cmd=("$cpp_peer") ;;
    *)    echo "bench: --peer must be auto, node or cpp" >&2; exit 1 ;;
esac
echo "bench: llama.cpp peer: $peer (${llama_cmd[*]})" >&2
if [ ! -f "$model" ]; then
    echo "bench: writing $model (nitro synth --preset gpt-oss-20b, about 12 GiB)" >&2
    ./build/nitro synth --arch gpt-oss --preset gpt-oss-20b -o "$model"
fi
out="$(mktemp -d)"
for r in $(seq 1 "$reps"); do
    ./build/nitro bench -m "$model" -t "$threads" -p "$n_prompt" -n "$n_gen" --json > "$out/nitro-$r.json"
    "${llama_cmd[@]}" --model "$model" --threads "$threads" --n-prompt "$n_prompt" --n-gen "$n_gen" > "$out/llama-$r.json"
done
python3 - "$out" "$reps" "$model" "$threads" "$peer" <<'PY'
import json, sys, statistics as st
d, reps, model, threads, peer = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
n = [json.load(open(f"{d}/nitro-{r}.json")) for r in range(1, reps + 1)]
l = [json.load(open(f"{d}/llama-{r}.json")) for r in range(1, reps + 1)]
def med(xs, k): return st.median(x[k] for x in xs)
print(f"model {model}, {threads} threads, {reps} alternating runs (median), llama.cpp peer {peer}, MEASURED")
print(f"{'':18}{'nitro':>12}{'llama.cpp':>12}{'ratio':>9}")
for k, name in (("prompt_tok_s", "prompt tok/s"), ("decode_tok_s", "decode tok/s")):
    a, b = med(n, k), med(l, k)
    print(f"{name:18}{a:12.2f}{b:12.2f}{a / b:9.2f}")
print(f"memory read bandwidth {med(n, 'read_bandwidth_gb_s'):.2f} GB/s; expert GEMV {med(n, 'expert_gemv_gb_s'):.2f} GB/s "
      f"({100 * med(n, 'expert_gemv_gb_s') / med(n, 'read_bandwidth_gb_s'):.0f}% of it); "
      f"CALCULATED expert floor {med(n, 'expert_floor_tok_s'):.2f} tok/s")
PY
rm -rf "$out"
