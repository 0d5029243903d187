#!/usr/bin/env python3
"""Turns the device run's routing traces (run_traces_device.sh: trace-<model>.jsonl.gz, traces.json)
into the committed bench/traces/: binary nitro traces, their `nitro sim` statistics, and a README
table.

    python3 tools/train/import_traces.py --nitro build/nitro IN_DIR [--out bench/traces]
            [--prefill-keep 256] [--weights]

For each model: the JSON Lines are imported with `nitro trace import` (optionally keeping only the
first --prefill-keep prompt tokens of each prompt, and without the router weights unless
--weights: a replay then weights the trace's experts equally, which changes no timing), written as
<model>.nmtr; `nitro trace info --json` and `nitro sim --json` (policies lru, static, rate, opt at
1/8, 1/4, 1/2 and 3/4 of the experts per layer) go to <model>.sim.json. README.md gets the table of
hit rates (SIMULATED) and router statistics. Only Python's standard library is needed.
"""
import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile

SHAPES = {"gpt-oss-20b": (24, 32, 4), "gpt-oss-120b": (36, 128, 4), "qwen3-30b-a3b": (48, 128, 8)}
POLICIES = "lru,static,rate,opt"


def run(args):
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(args)} failed:\n{r.stderr[-2000:]}")
    return r.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("src", help="the device run's OUT folder")
    ap.add_argument("--nitro", required=True)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "traces"))
    ap.add_argument("--prefill-keep", type=int, default=256, help="prompt tokens kept per prompt")
    ap.add_argument("--weights", action="store_true", help="keep the router weights (larger files)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    meta = json.load(open(os.path.join(args.src, "traces.json")))
    rows = []
    for name, (L, X, K) in SHAPES.items():
        sh = meta["models"].get(name, {}).get("shape")
        if sh:  # the shape the run trained (the real one, or train_traces.py --tiny's)
            L, X, K = sh["n_layer"], sh["n_expert"], sh["k"]
        src = os.path.join(args.src, f"trace-{name}.jsonl.gz")
        if not os.path.exists(src):
            print(f"{name}: no {src}, skipped")
            continue
        with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as tmp:
            with gzip.open(src, "rt") as f:
                for line in f:
                    r = json.loads(line)
                    if r["phase"] == "prefill" and r["token_idx"] >= args.prefill_keep:
                        continue
                    if not args.weights:
                        r.pop("gating_probs", None)
                    tmp.write(json.dumps(r, separators=(",", ":")) + "\n")
        nmtr = os.path.join(args.out, f"{name}.nmtr")
        run([args.nitro, "trace", "import", tmp.name, "-o", nmtr, "--n-layer", str(L), "--n-expert", str(X)])
        os.unlink(tmp.name)
        info = json.loads(run([args.nitro, "trace", "info", nmtr, "--json"]))
        caps = ",".join(str(max(1, X * f // 8)) for f in (1, 2, 4, 6))
        sim = json.loads(run([args.nitro, "sim", nmtr, "--policy", POLICIES, "--capacity", caps, "--json"]))
        m = meta["models"].get(name, {})
        out = {"model": name, "shape": {"n_layer": L, "n_expert": X, "n_expert_used": K}, "training": {
            k: m.get(k) for k in ("n_params", "steps", "tokens_seen", "train_s", "heldout_loss", "heldout_ppl", "shape")},
            "import": {"prefill_keep": args.prefill_keep, "weights": args.weights}, "trace_info": info, "sim": sim}
        json.dump(out, open(os.path.join(args.out, f"{name}.sim.json"), "w"), indent=1)
        rows.append((name, L, X, K, m, info, sim, os.path.getsize(nmtr)))
        print(f"{name}: {nmtr} ({os.path.getsize(nmtr)} bytes)")
    write_readme(args, meta, rows)


def pct(x):
    return f"{100 * x:.1f}%"


def write_readme(args, meta, rows):
    lines = ["# Trained routing traces (SIMULATED statistics, MEASURED routing of small trained models)", "",
             "Routing of three small MoE models trained on the device (`tools/train/run_traces_device.sh`, "
             "`train_traces.py`) at the routing shapes of real models, captured over 8 held-out prompts "
             "(3 code, 3 prose, 2 chat-like; 256 tokens each) and 256 sampled tokens per prompt. Used by "
             "`nitro bench --routing replay:bench/traces/MODEL.nmtr` (docs/bench.md). These are NOT the real "
             "models' routing: the models are narrow (a few hundred million parameters at most) and trained for under "
             "a minute each (table); they have the real n_layer, n_expert, top-k and gating, and the temporal locality a trained "
             "router gives.", "",
             f"Imported with `tools/train/import_traces.py` (prompt tokens kept per prompt: {args.prefill_keep}; router "
             f"weights {'kept' if args.weights else 'dropped: a replay weights the experts equally'}). Corpus id "
             f"{meta.get('corpus_sha256')}.", "",
             "| model | shape | trained | held-out loss | records | file |", "|---|---|---|---:|---:|---:|"]
    for name, L, X, K, m, info, sim, size in rows:
        lines.append(f"| {name} | {L} x {X}, top-{K} | {m.get('steps')} steps, {m.get('tokens_seen')} tokens, "
                     f"{m.get('train_s')} s | {m.get('heldout_loss')} | {info.get('records')} | {size / 1e6:.2f} MB |")
    lines += ["", "## Hit rates per layer cache (SIMULATED, `nitro sim`; capacity = slots per layer)", "",
              "`static` is profiled on the same trace (optimistic, docs/sim.md); `rate` admits 1 miss per layer per 4 "
              "tokens; `opt` is Belady's bound.", ""]
    for name, L, X, K, m, info, sim, size in rows:
        caps = sorted({r["capacity"] for r in sim["results"]})
        lines += [f"**{name}**", "", "| policy | " + " | ".join(f"{c} of {X}" for c in caps) + " |",
                  "|---|" + "---:|" * len(caps)]
        for pol in POLICIES.split(","):
            cells = []
            for c in caps:
                hit = [r["hit_rate"] for r in sim["results"] if r["capacity"] == c and r["policy"].split(":")[0] == pol]
                cells.append(pct(hit[0]) if hit else "-")
            lines.append(f"| {pol} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += ["## Router statistics (per layer, from the trace)", "",
              "Shares: of a layer's selections, those of its most selected 10/20/30% of experts (uniform routing: "
              "10/20/30%); entropy of the selection distribution / ln(n_expert) (uniform: 1). Real gpt-oss-120b's top "
              "10% take 31-51% of a layer's selections (docs: DESIGN notes, the F51 trace).", "",
              "| model | top-10% share, mean (min-max over layers) | top-20% | top-30% | entropy | next token repeats the first choice | top-2 overlap with the next token |",
              "|---|---|---:|---:|---:|---:|---:|"]
    caveats = []
    for name, L, X, K, m, info, sim, size in rows:
        lay = sim["router"]["layers"]
        share = [l["top10_share"] for l in lay]
        mean = sim["router"]["mean"]
        lines.append(f"| {name} | {pct(sum(share) / len(share))} ({pct(min(share))}-{pct(max(share))}) | "
                     f"{pct(mean['top20_share'])} | {pct(mean['top30_share'])} | {mean['entropy_normalised']:.3f} | "
                     f"{pct(mean['same_first_rate'])} | {pct(mean['top2_overlap_rate'])} |")
        if mean["top30_share"] > 0.7:
            caveats.append(f"- **{name}**: its router concentrates on few experts (the top 30% take "
                           f"{pct(mean['top30_share'])} of the selections, entropy {mean['entropy_normalised']:.2f}) after "
                           f"{m.get('steps')} training steps (held-out loss {m.get('heldout_loss')} nats: barely trained; "
                           "the load-balancing loss had little time to act). Its hit rates are likely higher than a "
                           "well-trained router gives: read them as optimistic.")
    if caveats:
        lines += ["", "## Caveats", ""] + caveats
    lines += ["", f"Device run: torch {meta.get('torch')}, experts via {meta.get('experts_matmul')}, deadline "
              f"{meta['args'].get('deadline')} s, {meta.get('total_s')} s in all (traces.json of the run)."]
    open(os.path.join(args.out, "README.md"), "w").write("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
