#!/usr/bin/env python3
"""Prepares the carried inputs of tools/train/run_traces_device.sh (routing traces of trained
models at real routing shapes, docs/bench.md "Trained routing traces"), deterministically.

    python3 tools/train/make_trace_corpus.py --nitro build/nitro [--out .carry/traces]

Corpus (tokenized with the embedded model's tokenizer, tools/train/tokenizer.json, 8192 tokens):
  py/     code: the CPython 3.11 standard library as tools/train/make_corpus.sh takes it
  doc/    English: the Python 3.11 documentation sources (reStructuredText), make_corpus.sh
  man/    English: Debian's manual pages of sections 5, 7 and 8 on this machine, rendered to plain
          text (man -l | col -bx)
  lic/    English: /usr/share/common-licenses
A document is held out when the first 8 hex digits of sha256(its name) are 0 mod 25, as
make_corpus.sh splits. Held-out documents give the prompts of the traces: 3 code, 3 prose and 2
chat-like (harmony markup around a prose passage: <|start|>user<|message|>...<|end|>
<|start|>assistant<|channel|>final<|message|>), each exactly 256 tokens.

Writes into --out (git-ignored; carry it to the device): train.u16 and heldout.u16 (little-endian
uint16 ids, each document followed by <|endoftext|>), prompts.json, tokenizer.json, corpus.tsv
(split, tokens, sha256 of the text, name) and corpus.sha256 (of corpus.tsv). Only the routing
traces made from it are committed, never the text.
Needs: python3 (stdlib), man + groff + col (man-db, groff-base, bsdextrautils), the nitro binary.
"""
import argparse
import gzip
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
EOT = 8184  # <|endoftext|>
PROMPT_TOKENS = 256
SECTIONS = ("5", "7", "8")


def held_out(name):
    return int(hashlib.sha256(name.encode()).hexdigest()[:8], 16) % 25 == 0


def render_man(dst):
    """Renders the manual pages of SECTIONS into dst/<section>/<page>.txt (kept between runs)."""
    env = dict(os.environ, MANWIDTH="100", LC_ALL="C.UTF-8", MAN_KEEP_FORMATTING="")
    n = 0
    for sec in SECTIONS:
        src = f"/usr/share/man/man{sec}"
        if not os.path.isdir(src):
            continue
        os.makedirs(os.path.join(dst, sec), exist_ok=True)
        for f in sorted(os.listdir(src)):
            out = os.path.join(dst, sec, f.removesuffix(".gz") + ".txt")
            if os.path.exists(out):
                n += 1
                continue
            path = os.path.join(src, f)
            if os.path.islink(path):
                continue  # an alias of another page
            try:
                man = subprocess.run(["man", "-P", "cat", "-l", path], env=env, capture_output=True, timeout=60)
                txt = subprocess.run(["col", "-bx"], input=man.stdout, capture_output=True, timeout=60).stdout
            except subprocess.TimeoutExpired:
                continue
            text = txt.decode("utf-8", "replace")
            if len(text) < 2000 or man.returncode != 0:
                text = ""  # a stub: kept as an empty file so it is not rendered again, skipped below
            with open(out, "w") as fo:
                fo.write(text)
            n += 1
            if n % 200 == 0:
                print(f"man pages rendered: {n}", flush=True)
    return n


def documents(data):
    """(name, text) of every corpus document, sorted by name (LC_ALL=C byte order)."""
    docs = []
    corpus = os.path.join(data, "corpus")
    for root, _, files in os.walk(corpus):
        for f in files:
            p = os.path.join(root, f)
            docs.append((os.path.relpath(p, corpus), p))
    man = os.path.join(data, "man")
    for root, _, files in os.walk(man):
        for f in files:
            p = os.path.join(root, f)
            docs.append(("man/" + os.path.relpath(p, man), p))
    lic = "/usr/share/common-licenses"
    for f in sorted(os.listdir(lic)):
        p = os.path.join(lic, f)
        if os.path.isfile(p) and not os.path.islink(p):
            docs.append(("lic/" + f, p))
    out = []
    for name, p in sorted(docs, key=lambda d: d[0].encode()):
        with open(p, "rb") as fi:
            raw = fi.read()
        if p.endswith(".gz"):
            raw = gzip.decompress(raw)
        text = raw.decode("utf-8", "replace")
        if len(text) >= 200:
            out.append((name, text))
    return out


TOKEN_CACHE = {}  # sha256 of (special, text) -> ids, kept in data/tokens-cache.json between runs


def tokenize(nitro, model, text, special=False):
    key = hashlib.sha256((("1" if special else "0") + text).encode()).hexdigest()
    if key not in TOKEN_CACHE:
        args = [nitro, "tokenize", "-m", model, "--json"] + (["--special"] if special else [])
        r = subprocess.run(args, input=text.encode(), capture_output=True, check=True)
        TOKEN_CACHE[key] = json.loads(r.stdout)["ids"]
    return TOKEN_CACHE[key]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nitro", required=True, help="the nitro binary (for `nitro tokenize`)")
    ap.add_argument("--model", default=os.path.join(HERE, "..", "..", "models", "tiny-moe-pystd.gguf"),
                    help="a GGUF with the embedded model's tokenizer")
    ap.add_argument("--out", default=os.path.join(HERE, "..", "..", ".carry", "traces"))
    args = ap.parse_args()
    data = os.path.join(HERE, "data")
    if not os.path.exists(os.path.join(data, "files.tsv")):
        subprocess.run(["bash", os.path.join(HERE, "make_corpus.sh")], check=True)
    print(f"man pages: {render_man(os.path.join(data, 'man'))}", flush=True)
    docs = documents(data)
    cache = os.path.join(data, "tokens-cache.json")
    if os.path.exists(cache):
        TOKEN_CACHE.update(json.load(open(cache)))
    os.makedirs(args.out, exist_ok=True)
    train, heldout, rows = [], [], []
    held = {}
    for i, (name, text) in enumerate(docs):
        ids = tokenize(args.nitro, args.model, text)
        if not ids:
            continue
        split = "heldout" if held_out(name) else "train"
        (heldout if split == "heldout" else train).extend(ids + [EOT])
        if split == "heldout":
            held[name] = (text, ids)
        rows.append(f"{split}\t{len(ids)}\t{hashlib.sha256(text.encode()).hexdigest()}\t{name}")
        if (i + 1) % 250 == 0:
            print(f"tokenized {i + 1}/{len(docs)} documents", flush=True)
    json.dump(TOKEN_CACHE, open(cache, "w"))
    assert max(train + heldout) < 8192
    for fname, ids in (("train.u16", train), ("heldout.u16", heldout)):
        with open(os.path.join(args.out, fname), "wb") as fo:
            fo.write(struct.pack(f"<{len(ids)}H", *ids))
    with open(os.path.join(args.out, "corpus.tsv"), "w") as fo:
        fo.write("\n".join(rows) + "\n")
    with open(os.path.join(args.out, "corpus.tsv"), "rb") as fi:
        corpus_id = hashlib.sha256(fi.read()).hexdigest()
    with open(os.path.join(args.out, "corpus.sha256"), "w") as fo:
        fo.write(corpus_id + "\n")

    # Prompts: held-out documents of at least 2 x PROMPT_TOKENS tokens, in sha256(name) order.
    # Prose must read as prose: at least 80% letters and spaces in its first 2000 characters (this
    # leaves out character-set tables and option lists).
    def prose_like(text):
        t = text[:2000]
        return sum(ch.isalpha() or ch == " " for ch in t) >= 0.8 * len(t)

    def pick(prefixes, n, prose=False):
        c = [k for k in held if k.startswith(prefixes) and len(held[k][1]) >= 2 * PROMPT_TOKENS and (not prose or prose_like(held[k][0]))]
        return sorted(c, key=lambda k: hashlib.sha256(k.encode()).hexdigest())[:n]
    code = pick(("py/",), 3)
    prose = pick(("doc/", "man/", "lic/"), 5, prose=True)
    prompts = []
    for k in code:
        prompts.append({"name": k, "kind": "code", "ids": held[k][1][:PROMPT_TOKENS]})
    for k in prose[:3]:
        prompts.append({"name": k, "kind": "prose", "ids": held[k][1][:PROMPT_TOKENS]})
    head = tokenize(args.nitro, args.model, "<|start|>user<|message|>Explain this in simple words:\n\n", special=True)
    tail = tokenize(args.nitro, args.model, "<|end|><|start|>assistant<|channel|>final<|message|>", special=True)
    for k in prose[3:5]:
        body = held[k][1][:PROMPT_TOKENS - len(head) - len(tail)]
        prompts.append({"name": k, "kind": "chat", "ids": head + body + tail})
    assert len(prompts) == 8 and all(len(p["ids"]) == PROMPT_TOKENS for p in prompts), [len(p["ids"]) for p in prompts]
    with open(os.path.join(args.out, "prompts.json"), "w") as fo:
        json.dump({"corpus_sha256": corpus_id, "prompt_tokens": PROMPT_TOKENS, "prompts": prompts}, fo)
    shutil.copy(os.path.join(HERE, "tokenizer.json"), os.path.join(args.out, "tokenizer.json"))
    print(f"train {len(train)} tokens, heldout {len(heldout)} tokens, {len(prompts)} prompts; corpus id {corpus_id}")
    print(f"wrote {args.out}: " + ", ".join(sorted(os.listdir(args.out))))


if __name__ == "__main__":
    sys.exit(main())
