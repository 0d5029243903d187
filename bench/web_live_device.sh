#!/usr/bin/env bash
# The web page's live statistics on the GPU engines (CI has no GPU; tests/server/live.test.mjs
# covers the CPU engine): `nitro serve --mode hybrid` and `--mode gpu` on a synth gpt-oss-20b in
# /dev/shm, two greedy chat requests each, then /v1/nitro/status and /v1/nitro/experts checked:
#   hybrid: mode "hybrid", cache true, routing true; every MoE layer has experts in VRAM and on the
#           CPU (home 1/2 and 0); hits + misses > 0 and hit_rate = hits / (hits + misses); the
#           selections of each layer = tokens evaluated x n_expert_used (usage of both requests);
#           gpu_pairs + cpu_pairs + staged_pairs = selections;
#   gpu:    mode "gpu", routing false (not asked for), every expert home 2, gpu_pairs > 0.
# Also prints the last request's decode tok/s from the status (MEASURED, informative), and saves
# a screenshot-free JSON of each mode for a look.
#
#   bench/web_live_device.sh OUT
#
# Reads the nitro binary from .carry/bin.tar.xz (bench/make_carry.sh after building build-cuda),
# as the other device scripts do. Writes OUT/{hybrid,gpu}-{status,experts}.json, serve-*.log and
# summary.txt (PASS/FAIL per check). About 2 minutes on a 16-core H200 machine (the synth ~1 min
# the first time). Knobs: BUDGET (hybrid --vram-budget GiB, 8), THREADS (16), TOKENS (48).
set -uo pipefail
OUT=${1:?usage: bench/web_live_device.sh OUT}
mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
HERE=$(cd "$(dirname "$0")/.." && pwd)
W=/tmp/nitro-dev; mkdir -p "$W"
rm -rf "$W/bin"; tar xJf "$HERE/.carry/bin.tar.xz" -C "$W" || { echo "error: no .carry/bin.tar.xz (bench/make_carry.sh)"; exit 2; }
export LD_LIBRARY_PATH="$W/bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
NITRO="$W/bin/nitro"
BUDGET=${BUDGET:-8} THREADS=${THREADS:-16} TOKENS=${TOKENS:-48}
log() { echo "[$(date -u +%H:%M:%S)] $*"; }

M=/dev/shm/gpt-oss-20b.gguf
if [ "$(cat "$M.key" 2>/dev/null)" != "mxfp4" ]; then
    rm -f "$M" "$M.key"
    log "synth gpt-oss:gpt-oss-20b (MXFP4 experts) -> $M"
    "$NITRO" synth --arch gpt-oss --preset gpt-oss-20b --type mxfp4 -o "$M" > "$OUT/synth.log" 2>&1 \
        || { echo "error: synth failed (see $OUT/synth.log)"; exit 1; }
    echo mxfp4 > "$M.key"
fi

: > "$OUT/summary.txt"
for mode in hybrid gpu; do
    extra=""; [ "$mode" = hybrid ] && extra="--vram-budget $BUDGET"
    log "nitro serve --mode $mode $extra"
    "$NITRO" serve -m "$M" --mode "$mode" $extra --port 0 -t "$THREADS" -c 1024 > "$OUT/serve-$mode.log" 2>&1 &
    pid=$!
    port=""
    for _ in $(seq 1 240); do
        port=$(grep -oE 'listening on http://127\.0\.0\.1:[0-9]+' "$OUT/serve-$mode.log" | grep -oE '[0-9]+$')
        [ -n "$port" ] && break
        kill -0 $pid 2>/dev/null || break
        sleep 0.5
    done
    if [ -z "$port" ]; then echo "$mode: FAIL the server did not start (serve-$mode.log)" >> "$OUT/summary.txt"; kill $pid 2>/dev/null; continue; fi
    base="http://127.0.0.1:$port"
    : > "$OUT/$mode-usage.jsonl"
    for prompt in "Explain mixture-of-experts models in one paragraph." "Write a Python function that reverses a list."; do
        curl -s "$base/v1/chat/completions" -H 'Content-Type: application/json' \
            -d "{\"messages\":[{\"role\":\"user\",\"content\":\"$prompt\"}],\"max_tokens\":$TOKENS,\"temperature\":0}" \
            | python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["usage"]))' >> "$OUT/$mode-usage.jsonl"
    done
    curl -s "$base/v1/nitro/status" > "$OUT/$mode-status.json"
    curl -s "$base/v1/nitro/experts" > "$OUT/$mode-experts.json"
    kill -TERM $pid; wait $pid 2>/dev/null
    python3 - "$mode" "$OUT" >> "$OUT/summary.txt" <<'EOF'
import json, sys
mode, out = sys.argv[1], sys.argv[2]
st = json.load(open(f"{out}/{mode}-status.json"))
ex = json.load(open(f"{out}/{mode}-experts.json"))
usage = [json.loads(l) for l in open(f"{out}/{mode}-usage.jsonl")]
K = st["model"]["n_expert_used"]
evaluated = sum(u["prompt_tokens"] - u.get("prompt_tokens_details", {}).get("cached_tokens", 0) + u["completion_tokens"] - 1 for u in usage)
def check(name, ok, detail=""):
    print(f"{mode}: {'PASS' if ok else 'FAIL'} {name}{(': ' + detail) if detail else ''}")
x = st["experts"]
check("engine mode", st["engine"]["mode"] == mode, st["engine"]["mode"])
moe = [L for L in ex["layers"] if L["moe"]]
if mode == "hybrid":
    check("routing and cache reported", x["routing"] and x["cache"], f"routing {x['routing']}, cache {x['cache']}")
    check("every layer has experts in VRAM and on the CPU", all(0 in L["home"] and any(h > 0 for h in L["home"]) for L in moe))
    check("hits and misses counted", x["hits"] + x["misses"] > 0, f"{x['hits']} hits, {x['misses']} misses")
    if x["hits"] + x["misses"] > 0:
        check("hit rate", abs(x["hit_rate"] - x["hits"] / (x["hits"] + x["misses"])) < 1e-3, str(x["hit_rate"]))
    bad = [L["layer"] for L in moe if sum(L["selections"]) != evaluated * K]
    check("selections = tokens evaluated x n_expert_used per layer", not bad, f"{evaluated} tokens; layers off: {bad}")
    check("gpu + cpu + staged pairs = selections", x["gpu_pairs"] + x["cpu_pairs"] + x["staged_pairs"] == x["selections"],
          f"{x['gpu_pairs']} + {x['cpu_pairs']} + {x['staged_pairs']} vs {x['selections']}")
else:
    check("routing not asked for", not x["routing"])
    check("every expert in VRAM for good", all(set(L["home"]) == {2} for L in moe))
    check("GPU pairs counted", x["gpu_pairs"] > 0, str(x["gpu_pairs"]))
lr = st["last_request"] or {}
print(f"{mode}: MEASURED last request decode {lr.get('decode_tok_s')} tok/s, prompt {lr.get('prompt_tok_s')} tok/s, TTFT {lr.get('ttft_ms')} ms; CPU share {x['cpu_share']}")
EOF
done
cat "$OUT/summary.txt"
! grep -q FAIL "$OUT/summary.txt"
