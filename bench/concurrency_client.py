#!/usr/bin/env python3
"""Concurrent clients against a running `nitro serve` (bench/concurrency.sh; python3 standard
library only, so it runs on machines without pip or npm).

C client threads each send R streaming /v1/completions requests back to back (distinct prompts,
temperature 0, max_tokens N, ignore_eos so every request generates exactly N tokens). Prints one
JSON object on stdout:
  clients, requests, tokens        counts (tokens: generated, from each request's usage)
  wall_s                           seconds from the first request sent to the last answer
  agg_tok_s                        tokens / wall_s: aggregate generated tok/s
  decode_tok_s                     mean over requests of (tokens - 1) / (last token - first token), tok/s
  ttft_ms_mean, ttft_ms_max        time from sending a request to its first streamed token, ms
  metrics                          /metrics counters after minus before (batch steps, rows, experts)
With --table-row P it prints one Markdown row of bench/concurrency.sh's table instead.

  python3 bench/concurrency_client.py --url http://127.0.0.1:8080 --clients 4 --tokens 64
"""
import argparse
import http.client
import json
import threading
import time
import urllib.parse

WORDS = ("the sea light keeper storm bottle message town harbor night ship rock wave wind rain lamp "
         "stair door letter old").split()


def prompt(client, request, n_words):
    """A distinct prompt of n_words words for (client, request): no prefix is shared between them."""
    x = client * 7919 + request * 104729 + 1
    out = []
    for _ in range(n_words):
        x = (x * 1103515245 + 12345) % 2147483648
        out.append(WORDS[x % len(WORDS)])
    return f"{client}.{request}: " + " ".join(out)


def metrics(url):
    """The /metrics page as {name_with_labels: value} (numbers only)."""
    u = urllib.parse.urlparse(url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    c.request("GET", "/metrics")
    body = c.getresponse().read().decode()
    c.close()
    out = {}
    for line in body.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, value = line.rpartition(" ")
        try:
            out[name] = float(value)
        except ValueError:
            pass
    return out


def request(url, text, max_tokens, api_key):
    """One streaming completion: dict(t0, ttft, first, last, tokens); times in seconds (perf_counter)."""
    u = urllib.parse.urlparse(url)
    body = json.dumps({"prompt": text, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
                       "stream": True, "stream_options": {"include_usage": True}})
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    t0 = time.perf_counter()
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    c.request("POST", "/v1/completions", body=body, headers=headers)
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {r.read().decode(errors='replace')}")
    first = last = None
    tokens = 0
    while True:
        line = r.readline()
        if not line:
            break
        line = line.strip()
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            continue
        j = json.loads(line[6:])
        if j.get("usage"):
            tokens = j["usage"]["completion_tokens"]
        if j.get("choices"):
            now = time.perf_counter()
            if first is None:
                first = now
            last = now
    c.close()
    if first is None:
        raise RuntimeError("no streamed token")
    return {"t0": t0, "ttft": first - t0, "first": first, "last": last, "tokens": tokens}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True)
    ap.add_argument("--clients", type=int, default=1)
    ap.add_argument("--requests", type=int, default=2, help="requests per client, back to back")
    ap.add_argument("--tokens", type=int, default=64, help="max_tokens of every request")
    ap.add_argument("--prompt-words", type=int, default=40)
    ap.add_argument("--api-key", default="")
    ap.add_argument("--table-row", default="", help="print a Markdown row (this --parallel label) instead of JSON")
    ap.add_argument("--n-layer", type=int, default=0, help="layers of the model (per-layer columns of --table-row)")
    ap.add_argument("--warmup", type=int, default=1, help="requests sent alone first (page in weights)")
    a = ap.parse_args()
    for w in range(a.warmup):
        request(a.url, prompt(999, w, a.prompt_words), a.tokens, a.api_key)
    m0 = metrics(a.url)
    results, errors = [], []
    lock = threading.Lock()

    def client(ci):
        try:
            for ri in range(a.requests):
                r = request(a.url, prompt(ci, ri, a.prompt_words), a.tokens, a.api_key)
                with lock:
                    results.append(r)
        except Exception as e:  # reported below, the run fails
            with lock:
                errors.append(f"client {ci}: {e}")

    threads = [threading.Thread(target=client, args=(i,)) for i in range(a.clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if errors:
        raise SystemExit("\n".join(errors))
    m1 = metrics(a.url)
    tokens = sum(r["tokens"] for r in results)
    rates = [(r["tokens"] - 1) / (r["last"] - r["first"]) for r in results if r["tokens"] > 1 and r["last"] > r["first"]]
    keys = ["nitro_batch_steps_total", 'nitro_batch_rows_total{kind="decode"}', 'nitro_batch_rows_total{kind="prompt"}',
            "nitro_moe_experts_total", "nitro_moe_expert_rows_total", "nitro_moe_expert_bytes_total",
            "nitro_decode_steps_total", "nitro_decode_step_experts_total"]
    out = {
        "clients": a.clients, "requests": len(results), "tokens": tokens, "wall_s": wall,
        "agg_tok_s": tokens / wall, "decode_tok_s": sum(rates) / max(1, len(rates)),
        "ttft_ms_mean": 1000 * sum(r["ttft"] for r in results) / len(results),
        "ttft_ms_max": 1000 * max(r["ttft"] for r in results),
        "metrics": {k: m1[k] - m0.get(k, 0) for k in keys if k in m1},
    }
    print(table_row(out, a.table_row, a.n_layer) if a.table_row else json.dumps(out))


def table_row(r, parallel, n_layer):
    """One Markdown row of bench/concurrency.sh's table (columns as its header)."""
    m = r["metrics"]
    steps = m.get("nitro_batch_steps_total", 0)
    dec = m.get('nitro_batch_rows_total{kind="decode"}', 0)
    dsteps = m.get("nitro_decode_steps_total", 0)
    per_step = f"{dec / steps:.2f}" if steps else "-"
    experts = (f"{m['nitro_decode_step_experts_total'] / (dsteps * n_layer):.1f}"
               if dsteps and n_layer and "nitro_decode_step_experts_total" in m else "n/a")
    mib = (f"{m['nitro_moe_expert_bytes_total'] / r['tokens'] / 2**20:.2f}"
           if "nitro_moe_expert_bytes_total" in m and r["tokens"] else "n/a")
    return (f"| {r['clients']} | {parallel} | {r['requests']} | {r['tokens']} | {r['wall_s']:.2f} | {r['agg_tok_s']:.1f} | "
            f"{r['decode_tok_s']:.1f} | {r['ttft_ms_mean']:.0f} | {r['ttft_ms_max']:.0f} | {per_step} | {experts} | {mib} |")


if __name__ == "__main__":
    main()
