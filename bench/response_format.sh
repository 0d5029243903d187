#!/usr/bin/env bash
# What response_format costs in a live server (docs/grammar.md): decode tok/s of chat completions
# without response_format, with json_object and with a json_schema, greedy and sampled, and the
# grammar's time per token from /metrics; every constrained answer is checked with python's json.
#
#   bench/response_format.sh MODEL [MODE]        MODE: cpu (default), gpu, hybrid, auto
#
# MODEL needs a chat format (harmony or ChatML): a synth model made with
#   nitro synth --arch gpt-oss --preset gpt-oss-20b --vocab-from tiny-gptoss-mxfp4.gguf -o g20.gguf
# has gpt-oss's real vocabulary (201,088 tokens). Prints a Markdown table labelled MEASURED.
# Environment: NITRO (binary; default build/nitro beside this script), REQUESTS per row (4),
# TOKENS (max_tokens, 256), THREADS (-t, 0 = all), EXTRA (more serve flags), PYTHON (python3).
set -uo pipefail
MODEL=${1:?usage: bench/response_format.sh MODEL [MODE]}
MODE=${2:-cpu}
HERE=$(cd "$(dirname "$0")" && pwd)
NITRO=${NITRO:-$HERE/../build/nitro}
REQUESTS=${REQUESTS:-4}
TOKENS=${TOKENS:-256}
THREADS=${THREADS:-0}
EXTRA=${EXTRA:-}
PYTHON=${PYTHON:-python3}
[ -x "$NITRO" ] || { echo "error: NITRO=$NITRO is not an executable nitro binary" >&2; exit 2; }
[ -f "$MODEL" ] || { echo "error: model $MODEL not found" >&2; exit 2; }
TMP=$(mktemp -d)
SERVER_PID=
cleanup() { [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null; rm -rf "$TMP"; }
trap cleanup EXIT

# shellcheck disable=SC2086
"$NITRO" serve -m "$MODEL" --mode "$MODE" --host 127.0.0.1 --port 0 -t "$THREADS" -c 4096 $EXTRA 2> "$TMP/serve.log" > /dev/null &
SERVER_PID=$!
URL=
for _ in $(seq 1 1800); do
    URL=$(grep -oE 'listening on http://127\.0\.0\.1:[0-9]+' "$TMP/serve.log" | head -1 | sed 's/listening on //')
    [ -n "$URL" ] && break
    kill -0 "$SERVER_PID" 2>/dev/null || { cat "$TMP/serve.log" >&2; exit 1; }
    sleep 0.1
done
[ -n "$URL" ] || { echo "error: nitro serve did not start in 180 s" >&2; exit 1; }
grep -E '^(model|placement|threads) ' "$TMP/serve.log"

"$PYTHON" - "$URL" "$REQUESTS" "$TOKENS" <<'EOF'
import json, sys, time, urllib.request

url, n_req, max_tokens = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
PERSON = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 24}, "age": {"type": "integer"},
    "email": {"anyOf": [{"type": "string", "maxLength": 32}, {"type": "null"}]},
    "role": {"enum": ["admin", "user", "guest"]},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 4}},
    "required": ["name", "age", "role", "tags"], "additionalProperties": False}

def post(path, body):
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=3600))

def metrics():
    out = {}
    for line in urllib.request.urlopen(url + "/metrics").read().decode().splitlines():
        if line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            out[k] = float(v)
    return out

def valid(fmt, text):
    try:
        v = json.loads(text)
    except ValueError:
        return False
    if fmt == "json_object":
        return isinstance(v, dict)
    return (isinstance(v, dict) and set(v) <= set(PERSON["properties"]) and isinstance(v.get("name"), str)
            and isinstance(v.get("age"), int) and v.get("role") in ("admin", "user", "guest") and isinstance(v.get("tags"), list))

formats = {"none": None, "json_object": {"type": "json_object"},
           "json_schema": {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}}}
print("\n| response_format | sampling | requests | tokens | decode tok/s | grammar ms/token | stop | valid |")
print("|---|---|---:|---:|---:|---:|---:|---:|")
for name, rf in formats.items():
    for sampling in ({"temperature": 0}, {"temperature": 1}):
        m0 = metrics()
        tokens = stops = ok = 0
        decode_s = 0.0
        for i in range(n_req):
            body = {"messages": [{"role": "user", "content": "Give me one person as JSON: name, age, role, tags."}],
                    "max_tokens": max_tokens, "seed": i, **sampling}
            if rf:
                body["response_format"] = rf
                body["reasoning_budget_tokens"] = 0
            r = post("/v1/chat/completions", body)
            c = r["choices"][0]
            tokens += r["usage"]["completion_tokens"]
            stops += c["finish_reason"] == "stop"
            if rf and c["finish_reason"] == "stop":
                ok += valid(name, c["message"]["content"] or "")
        m1 = metrics()
        d = lambda k: m1.get(k, 0) - m0.get(k, 0)
        tok_s = d("nitro_decode_steps_total") / d("nitro_decode_seconds_total") if d("nitro_decode_seconds_total") > 0 else 0
        masks = d("nitro_grammar_masks_total")
        gms = 1000 * d("nitro_grammar_mask_seconds_total") / masks if masks else 0
        samp = "greedy" if sampling["temperature"] == 0 else "temperature 1"
        print(f"| {name} | {samp} | {n_req} | {tokens} | {tok_s:.1f} | {gms:.3f} | {stops} | {ok if rf else '-'} |")
print("\nMEASURED: decode tok/s = decode steps / decode seconds from /metrics (the server's own clock); "
      "grammar ms/token = nitro_grammar_mask_seconds_total / nitro_grammar_masks_total; "
      "valid = answers that ended (stop) and parse as the format asks (python json).")
EOF
