#!/usr/bin/env bash
# The CPU expert kernels at DRAM speed (issue 19), measured on one machine in one go:
#   - the read probe and the expert kernel GB/s per weight type and ISA level (every SIMD level
#     this CPU has: avx2, avxvnni where present, avx512), for 1, 4 and 16 tokens, as % of the probe of the same run (nitro bench
#     kernel table: cpu::moe_ffn on random experts, gpt-oss-20b and Qwen3-30B-A3B expert shapes),
#     then the one-token cells of MXFP4, Q4_K and IQ4_XS again in the reverse order;
#   - both models' expert products through moe_ffn, file mapping vs --no-mmap (huge pages);
#   - the one-token kernels' software prefetch: distance x cache level (t0 = L1, t1 = L2), both levels;
#   - CPU-only decode and prompt tok/s of nitro vs llama.cpp (build/llama-peer/llama_cpp_bench,
#     docs/peer.md) on synthetic gpt-oss-20b and qwen3-30b-a3b, in A B B A order, at the best
#     level, and on both models once more with NITRO_ISA=avx2 against llama.cpp's haswell build;
#   - page faults per decode token.
# Writes OUT_DIR/summary.json and OUT_DIR/summary.txt (and every raw JSON), prints the text.
#
#   bash bench/cpu_kernels_device.sh BUILD_DIR OUT_DIR
#
# Environment: THREADS (default: nproc), MODELS_DIR (keep the synthetic models there and reuse
# them; default: a temporary folder in /dev/shm when it has 50 GB free, else in TMPDIR, removed
# at the end), QWEN_TYPE (expert type of the Qwen3 synth,
# default q8_0; q4_0 or mxfp4 synthesize faster), LLAMA_CPP_BENCH (default
# BUILD_DIR/llama-peer/llama_cpp_bench), LLAMA_BENCH_NATIVE (optional: a llama-bench binary of
# llama.cpp built on this machine, e.g. the CUDA build of bench/kernels_device.sh; the decode part
# then also runs it CPU-only, -ngl 0 with no GPU visible, between the peer's runs and nitro's
# second: on 2026-12-04 that build decoded a qwen3 Q4_K file 1.65x faster than the peer's CPU
# variants did on 2026-12-05, and the two were never compared in one call), KERNEL_SECONDS (per
# kernel cell, default 0.3), KERNEL_POOL (GiB of random experts per kernel cell and of the read
# probe, default 4: well above the lent Xeon's 300 MiB L3; at 1 GiB some cells read above 100% of
# the probe), SMALL=1
# (the `tiny` presets instead: checks the script itself in seconds, the figures mean nothing),
# N_PROMPT / N_GEN (prompt and generated tokens of the decode runs, default 128 / 32), SWEEP (the
# prefetch runs, "BYTES:HINT ...", default six; "none" for none), PARTS (what to
# run, comma-separated, default all: kernels, sweep, nommap, decode; the summary prints the parts
# whose results are in OUT_DIR). The whole script can pass a 10-minute slot: split it over two
# calls with the same MODELS_DIR and OUT_DIR, e.g. PARTS=kernels,sweep,nommap then PARTS=decode.
# Needs: the nitro build (Release), build/llama-peer (carry it to the device), python3, ~45 GB of
# disk in MODELS_DIR and as much RAM for the page cache. About 8 minutes on 16 cores (ASSUMED from
# the 6 minutes MEASURED before the AVX2 Qwen3 runs and the hint sweep were added).
# Every figure it prints is MEASURED on the machine it runs on; nothing here is asserted.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 BUILD_DIR OUT_DIR" >&2; exit 2; }
build=$(cd "$1" && pwd)
mkdir -p "$2"
out=$(cd "$2" && pwd)
nitro="$build/nitro"
peer="${LLAMA_CPP_BENCH:-$build/llama-peer/llama_cpp_bench}"
native="${LLAMA_BENCH_NATIVE:-}"
threads="${THREADS:-$(nproc)}"
qwen_type="${QWEN_TYPE:-q8_0}"
ksec="${KERNEL_SECONDS:-0.3}"
n_prompt="${N_PROMPT:-128}"
parts=",${PARTS:-kernels,sweep,nommap,decode},"
part() { [[ "$parts" == *",$1,"* ]]; }
n_gen="${N_GEN:-32}"
kpool="${KERNEL_POOL:-4}"
[ "${SMALL:-0}" = 1 ] && kpool="${KERNEL_POOL:-0.25}"
[ -x "$nitro" ] || { echo "cpu_kernels_device: $nitro not found" >&2; exit 1; }
[ -x "$peer" ] || { echo "cpu_kernels_device: $peer not found (build it: cmake --build BUILD --target llama_cpp_bench)" >&2; exit 1; }
[ -z "$native" ] || [ -x "$native" ] || { echo "cpu_kernels_device: LLAMA_BENCH_NATIVE=$native is not an executable" >&2; exit 1; }
command -v python3 >/dev/null || { echo "cpu_kernels_device: python3 is needed for the summary" >&2; exit 1; }
if [ -n "${MODELS_DIR:-}" ]; then
    models="$MODELS_DIR"
    mkdir -p "$models"
    keep=1
else
    # RAM-backed when there is room (no disk writes while synthesizing; the page cache holds the
    # models either way), else TMPDIR.
    base="${TMPDIR:-/tmp}"
    if [ -d /dev/shm ] && [ "$(df -Pk /dev/shm | awk 'NR==2 {print $4}')" -gt $((50 * 1024 * 1024)) ]; then base=/dev/shm; fi
    models=$(mktemp -d "$base/nitro-device-models.XXXXXX")
    keep=0
fi
cleanup() { [ "$keep" = 1 ] || rm -rf "$models"; rm -rf "${haswell:-}"; }
trap cleanup EXIT
t_start=$(date +%s)
log() { echo "[cpu_kernels_device +$(( $(date +%s) - t_start ))s] $*" >&2; }

{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "threads: $threads (nproc $(nproc))"
    lscpu | grep -E '^(Model name|Socket|Core|Thread|NUMA node\(s\)|L3)' || true
    echo "thp: $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null || echo unknown)"
    echo "load before: $(cat /proc/loadavg)"
    "$nitro" --version 2>&1 || true
} > "$out/machine.txt"
log "machine: $(grep 'Model name' "$out/machine.txt" | head -1 | sed 's/  */ /g'), $threads threads, load $(cut -d' ' -f1-3 /proc/loadavg)"

# 1. Synthetic models (both at once: synth is single-threaded).
gp=gpt-oss-20b
qp=qwen3-30b-a3b
gv=() qv=()
if [ "${SMALL:-0}" = 1 ]; then  # tiny shapes with the real tokenizers of the fixtures (prompt ids < 1000)
    gp=tiny qp=tiny
    fx="${NITRO_SHARED_DIR:-$(dirname "$0")/../../shared}/fixtures"
    gv=(--vocab-from "$fx/tiny-gptoss-mxfp4.gguf") qv=(--vocab-from "$fx/tiny-qwen3moe-q8.gguf")
fi
g20="$models/gpt-oss-$gp.gguf"
q30="$models/qwen3moe-$qp-$qwen_type.gguf"
pids=()
[ -f "$g20" ] || { log "synth gpt-oss $gp (MXFP4 experts)"; "$nitro" synth --arch gpt-oss --preset $gp "${gv[@]}" -o "$g20" > "$out/synth-g20.log" 2>&1 & pids+=($!); }
[ -f "$q30" ] || { log "synth qwen3moe $qp ($qwen_type experts)"; "$nitro" synth --arch qwen3moe --preset $qp --type "$qwen_type" "${qv[@]}" -o "$q30" > "$out/synth-q30.log" 2>&1 & pids+=($!); }
for p in "${pids[@]}"; do wait "$p"; done
log "models ready: $(du -sh "$models" | cut -f1)"
# Warm the page cache once (the file reads are not what is measured).
cat "$g20" "$q30" > /dev/null

bench() {  # bench NAME ARGS... -> $out/NAME.json
    local name=$1
    shift
    "$nitro" bench -t "$threads" --json "$@" > "$out/$name.json" 2> "$out/$name.err" || {
        echo "cpu_kernels_device: nitro bench $* failed:" >&2
        cat "$out/$name.err" >&2
        exit 1
    }
}
llama() {  # llama NAME MODEL [EXTRA...] -> $out/NAME.json
    local name=$1 model=$2
    shift 2
    "$peer" --model "$model" --threads "$threads" --n-prompt "$n_prompt" --n-gen "$n_gen" "$@" > "$out/$name.json" 2> "$out/$name.err" || {
        echo "cpu_kernels_device: llama_cpp_bench failed:" >&2
        cat "$out/$name.err" >&2
        exit 1
    }
}

# 2. Kernel tables: every type x level x 1/4/16 tokens, gpt-oss shape (2880 x 2880, 4 experts;
#    K-quants 2816 x 2816) and Qwen3 shape (2048 x 768, 8 experts).
if part kernels; then
    log "kernel table, gpt-oss-20b shape"
    bench kernels-g20 -m "$g20" --kernels all --kernel-tokens 1,4,16 --kernel-seconds "$ksec" --kernel-pool "$kpool" --no-engine
    log "kernel table, qwen3-30b-a3b shape"
    bench kernels-q30 -m "$q30" --kernels all --kernel-tokens 1,4,16 --kernel-seconds "$ksec" --kernel-pool "$kpool" --no-engine
    # Qwen3-Next-80B's 512 small experts (2048 x 512, 10 per token): per-expert overheads, not
    # bytes, decide there (issue 16's hybrid decode read 13-25 GB/s of them against a 91 GB/s probe).
    log "kernel table, qwen3-next-80b-a3b shape"
    bench kernels-q3n -m "$q30" --kernels mxfp4,q4_k,iq4_xs,q8_0 --kernel-shape 2048x512 --kernel-experts 10 \
        --kernel-tokens 1,4,16 --kernel-seconds "$ksec" --kernel-pool "$kpool" --no-engine
    # The target cells once more, in the reverse order (levels from the highest, then IQ4_XS, Q4_K,
    # MXFP4): on 2026-12-05 the table's first cell, AVX2 MXFP4 at one token, read 58% of its probe
    # where four processes on 2026-12-04 had read 89-98% with the same kernel.
    levels=$("$nitro" --version | sed -n 's/.*this CPU can run: \([^;)]*\).*/\1/p' | tr ' ' '\n' | grep -v '^scalar$' | tac | paste -sd, -)
    log "kernel table again, reversed order ($levels; iq4_xs, q4_k, mxfp4), gpt-oss-20b shape"
    bench kernels-g20r -m "$g20" --kernels iq4_xs,q4_k,mxfp4 --kernel-isas "$levels" --kernel-tokens 1 \
        --kernel-seconds "$ksec" --kernel-pool "$kpool" --no-engine
fi

# 2b. The one-token kernels' software prefetch (default 1536 B ahead into L1, t0): distance x cache
#     level, both levels (AVX2 MXFP4 was at 88% of the probe with the default, issue 19).
sweep_runs="${SWEEP:-768:t0 3072:t0 6144:t0 1536:t1 3072:t1 6144:t1}"
part sweep && [ "$sweep_runs" != none ] || sweep_runs=""
for run in $sweep_runs; do
    pf=${run%:*} hint=${run#*:}
    log "kernel table, prefetch $pf B $hint"
    bench "prefetch-$pf-$hint" -m "$g20" --kernels mxfp4,q4_k,iq4_xs --kernel-tokens 1 --kernel-seconds "$ksec" --kernel-pool "$kpool" \
        --prefetch-bytes $pf --prefetch-hint $hint --no-engine
done

# 3. The model's experts: file mapping vs a --no-mmap copy (anonymous memory, THP), 1/4/16 tokens,
#    both models (2026-12-05: qwen3's mapped Q4_K experts read 50% of the probe through moe_ffn at
#    one token where random experts of the same shape in anonymous memory read 84%; gpt-oss 86%
#    against 99%: its matrices are 4.4 MB, qwen3's 0.9 MB, so page size may be what differs).
if part nommap; then
    log "expert products, --no-mmap"
    bench nommap-g20 -m "$g20" --kernels none --kernel-tokens 1,4,16 --no-mmap --no-engine
    bench nommap-q30 -m "$q30" --kernels none --kernel-tokens 1,4,16 --no-mmap --no-engine
fi

llama_native() {  # llama_native NAME MODEL -> $out/NAME.json (llama-bench's JSON: one record per test)
    local name=$1 model=$2
    CUDA_VISIBLE_DEVICES= "$native" -m "$model" -ngl 0 -t "$threads" -p "$n_prompt" -n "$n_gen" -r 2 -o json \
        > "$out/$name.json" 2> "$out/$name.err" || {
        echo "cpu_kernels_device: $native failed:" >&2
        tail -5 "$out/$name.err" >&2
        exit 1
    }
}

# 4. Decode and prompt: A B B A, nitro vs llama.cpp, same file and threads, N_PROMPT-token prompt
#    (the experts' multi-token tiles), N_GEN tokens; with LLAMA_BENCH_NATIVE, A B B C A.
decode_models="g20 q30"
part decode || decode_models=""
for m in $decode_models; do
    model=$g20
    [ $m = q30 ] && model=$q30
    log "decode A B B A on $m"
    bench "decode-$m-nitro-1" -m "$model" --kernels none --kernel-tokens 1,4,16 -p "$n_prompt" -n "$n_gen"
    llama "decode-$m-llama-1" "$model"
    llama "decode-$m-llama-2" "$model"
    [ -z "$native" ] || llama_native "decode-$m-native" "$model"
    bench "decode-$m-nitro-2" -m "$model" --kernels none --kernel-tokens 1,4,16 -p "$n_prompt" -n "$n_gen"
done
# AVX2: nitro at NITRO_ISA=avx2 against llama.cpp's haswell (AVX2) CPU build, both models.
haswell=$(mktemp -d "${TMPDIR:-/tmp}/nitro-haswell.XXXXXX")
ln -s "$(dirname "$peer")/libggml-cpu-haswell.so" "$haswell/"
for m in $decode_models; do
    model=$g20
    [ $m = q30 ] && model=$q30
    log "decode A B B A on $m, AVX2 (nitro NITRO_ISA=avx2, llama.cpp haswell)"
    NITRO_ISA=avx2 bench "decode-${m}avx2-nitro-1" -m "$model" --kernels none --kernel-tokens 1,4,16 -p "$n_prompt" -n "$n_gen"
    llama "decode-${m}avx2-llama-1" "$model" --backend-dir "$haswell"
    llama "decode-${m}avx2-llama-2" "$model" --backend-dir "$haswell"
    NITRO_ISA=avx2 bench "decode-${m}avx2-nitro-2" -m "$model" --kernels none --kernel-tokens 1,4,16 -p "$n_prompt" -n "$n_gen"
done
echo "load after: $(cat /proc/loadavg)" >> "$out/machine.txt"
log "summary"

python3 - "$out" "$threads" "$(( $(date +%s) - t_start ))" <<'PY'
import json, os, sys
out, threads, elapsed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def have(n): return os.path.exists(os.path.join(out, n + ".json"))
def load(n): return json.load(open(os.path.join(out, n + ".json")))
machine = open(os.path.join(out, "machine.txt")).read()
S = {"threads": threads, "elapsed_s": elapsed, "machine": machine, "labels": "every figure MEASURED on this machine"}
lines = []
P = lines.append
P("CPU expert kernels vs DRAM (bench/cpu_kernels_device.sh), MEASURED, %d threads, %d s" % (threads, elapsed))
if os.environ.get("SMALL") == "1": P("  SMALL=1: tiny presets, the figures check the script only")
for l in machine.strip().splitlines(): P("  " + l)

for tag, name in (("g20", "gpt-oss-20b"), ("q30", "qwen3-30b-a3b"), ("q3n", "qwen3-next-80b-a3b"),
                  ("g20r", "gpt-oss-20b (again, reversed order)")):
    if not have("kernels-" + tag): continue
    k = load("kernels-" + tag)
    probe = k["read_bandwidth_gb_s"]
    rows = k["kernels"]
    S["kernels_" + tag] = {"read_probe_gb_s": probe, "rows": rows}
    toks = sorted({r["tokens"] for r in rows})
    P("")
    P("expert kernels, %s expert shape, %d experts per step (moe_ffn on random experts; %% of the read probe made before each cell, over the same memory; first probe %.1f GB/s)"
      % (name, rows[0]["n_used"] if rows else 0, probe))
    P("  %-7s %-7s %-11s" % ("type", "isa", "E x F") + "".join("%20s" % ("%d token%s" % (t, "" if t == 1 else "s")) for t in toks))
    seen = []
    for r in rows:
        key = (r["type"], r["isa"])
        if key in seen: continue
        seen.append(key)
        cells = {x["tokens"]: x for x in rows if (x["type"], x["isa"]) == key}
        P("  %-7s %-7s %-11s" % (r["type"], r["isa"], "%dx%d" % (r["n_embd"], r["n_ff"])) +
          "".join("%12.1f GB/s %4.0f%%" % (cells[t]["gb_s"], cells[t].get("pct_of_cell_read", cells[t]["pct_of_read"])) if t in cells else "%20s" % "-" for t in toks))

P("")
P("one-token prefetch: distance and cache level (gpt-oss-20b shape; GB/s and % of each cell's read probe)")
sweep = []
if have("kernels-g20"):
    k0 = load("kernels-g20")
    sweep.append((k0["prefetch_bytes"], k0.get("prefetch_hint", "t0"), k0))
for f in sorted(os.listdir(out)):
    if f.startswith("prefetch-") and f.endswith(".json"):
        d = json.load(open(os.path.join(out, f)))
        sweep.append((d["prefetch_bytes"], d.get("prefetch_hint", "t0"), d))
S["prefetch_sweep"] = []
for pf, hint, d in sorted(sweep, key=lambda x: (x[1], x[0])):
    cells = [r for r in d["kernels"] if r["tokens"] == 1 and r["type"] in ("MXFP4", "Q4_K", "IQ4_XS")]
    S["prefetch_sweep"].append({"prefetch_bytes": pf, "prefetch_hint": hint, "read_probe_gb_s": d["read_bandwidth_gb_s"], "rows": cells})
    P("  %5d B %-3s " % (pf, hint) + "  ".join("%s/%s %.1f GB/s %.0f%%" % (r["type"], r["isa"], r["gb_s"], r.get("pct_of_cell_read", r["pct_of_read"])) for r in cells))

for tag, name in (("g20", "gpt-oss-20b"), ("q30", "qwen3-30b-a3b")):
    P("")
    P("the model's experts through moe_ffn (%s): file mapping vs --no-mmap" % name)
    mm = load("decode-%s-nitro-1" % tag) if have("decode-%s-nitro-1" % tag) else None
    nm = load("nommap-" + tag) if have("nommap-" + tag) else None
    if mm and nm: S["expert_products_" + tag] = {"mmap": mm["expert_gemv"], "no_mmap": nm["expert_gemv"], "mmap_read_probe_gb_s": mm["read_bandwidth_gb_s"],
                                    "no_mmap_read_probe_gb_s": nm["read_bandwidth_gb_s"], "no_mmap_load_s": nm["memory"]["load_s"]}
    for label, d in (("mmap", mm), ("no-mmap", nm)):
        if not d: continue
        for g in d["expert_gemv"]:
            P("  %-8s %2d token%s  %6.1f GB/s  %4.0f%% of %.1f GB/s  (%.2f ms per step)" % (label, g["tokens"], " " if g["tokens"] == 1 else "s",
              g["gb_s"], g["pct_of_read"], d["read_bandwidth_gb_s"], g["ms_per_step"]))
    if nm: P("  --no-mmap load: %.1f s" % nm["memory"]["load_s"])

P("")
P("CPU-only decode and prompt, nitro vs llama.cpp, A B B A (%d-token prompt, %d tokens)" % (int(os.environ.get("N_PROMPT", "128")), int(os.environ.get("N_GEN", "32"))))
P("  %-36s %20s %20s %7s %20s %20s %7s %13s" % ("model", "nitro decode tok/s", "llama.cpp decode", "ratio",
  "nitro prompt tok/s", "llama.cpp prompt", "ratio", "faults/token"))
S["decode"] = {}
for tag, name in (("g20", "gpt-oss-20b"), ("q30", "qwen3-30b-a3b"), ("g20avx2", "gpt-oss-20b, AVX2"), ("q30avx2", "qwen3-30b-a3b, AVX2")):
    if not all(have("decode-%s-%s-%d" % (tag, e, i)) for e in ("nitro", "llama") for i in (1, 2)): continue
    n = [load("decode-%s-nitro-%d" % (tag, i)) for i in (1, 2)]
    l = [load("decode-%s-llama-%d" % (tag, i)) for i in (1, 2)]
    nd, ld = [x["decode_tok_s"] for x in n], [x["decode_tok_s"] for x in l]
    npf, lpf = [x["prompt_tok_s"] for x in n], [x["prompt_tok_s"] for x in l]
    faults = sum(x["page_faults"]["decode_minor_per_token"] + x["page_faults"]["decode_major_per_token"] for x in n) / 2
    r = sum(nd) / sum(ld)
    rp = sum(npf) / sum(lpf)
    S["decode"][tag] = {"nitro_decode_tok_s": nd, "llama_decode_tok_s": ld, "decode_ratio": r, "nitro_prompt_tok_s": npf,
                        "llama_prompt_tok_s": lpf, "prompt_ratio": rp, "nitro_isa": n[0]["isa"],
                        "llama_variant": l[0].get("ggml_cpu_variant"), "llama_commit": l[0].get("llama_cpp_commit"),
                        "nitro_expert_gemv_gb_s": [x["expert_gemv_gb_s"] for x in n], "read_probe_gb_s": [x["read_bandwidth_gb_s"] for x in n],
                        "nitro_decode_floor_tok_s": n[0]["expert_floor_tok_s"], "decode_faults_per_token": faults}
    P("  %-36s %20s %20s %7.2f %20s %20s %7.2f %13.1f" % ("%s (%s / %s)" % (name, n[0]["isa"], l[0].get("ggml_cpu_variant", "?")),
      " / ".join("%.2f" % v for v in nd), " / ".join("%.2f" % v for v in ld), r,
      " / ".join("%.1f" % v for v in npf), " / ".join("%.1f" % v for v in lpf), rp, faults))
for tag in [t for t in ("g20", "q30") if t in S["decode"] and have("decode-%s-native" % t)]:
    recs = load("decode-%s-native" % tag)  # llama-bench -o json: a list, one record per test
    dec = [r["avg_ts"] for r in recs if r.get("n_gen", 0) > 0]
    pro = [r["avg_ts"] for r in recs if r.get("n_prompt", 0) > 0 and r.get("n_gen", 0) == 0]
    if not dec or not pro: continue
    d = S["decode"][tag]
    nd, npf = sum(d["nitro_decode_tok_s"]) / 2, sum(d["nitro_prompt_tok_s"]) / 2
    d["native_llama_bench"] = {"decode_tok_s": dec[0], "prompt_tok_s": pro[0], "decode_ratio": nd / dec[0], "prompt_ratio": npf / pro[0]}
    P("  %s: llama.cpp's own llama-bench (LLAMA_BENCH_NATIVE, -ngl 0, no GPU visible, mean of 2): decode %.2f tok/s, prompt %.1f;"
      " nitro's means / it: decode %.2f, prompt %.2f" % (tag, dec[0], pro[0], nd / dec[0], npf / pro[0]))
for tag in [t for t in ("g20", "q30", "g20avx2", "q30avx2") if t in S["decode"]]:
    d = S["decode"][tag]
    P("  %s: nitro expert products %.1f / %.1f GB/s against a %.1f / %.1f GB/s probe; CALCULATED expert floor %.1f tok/s"
      % (tag, d["nitro_expert_gemv_gb_s"][0], d["nitro_expert_gemv_gb_s"][1], d["read_probe_gb_s"][0], d["read_probe_gb_s"][1],
         d["nitro_decode_floor_tok_s"]))
    n1 = load("decode-%s-nitro-1" % tag)
    d["expert_products_by_tokens"] = n1["expert_gemv"]
    P("      the model's experts, %s, by tokens per step: " % n1["isa"] +
      ", ".join("%d: %.1f GB/s (%.0f%%)" % (g["tokens"], g["gb_s"], g["pct_of_read"]) for g in n1["expert_gemv"]))
json.dump(S, open(os.path.join(out, "summary.json"), "w"), indent=2)
open(os.path.join(out, "summary.txt"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
log "done: $out/summary.txt, $out/summary.json"
