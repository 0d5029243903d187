#!/usr/bin/env python3
"""Trains three small MoE models at the routing shapes of real ones and captures their routing
over held-out prompts as nitro router traces (JSON Lines, docs/trace-format.md), in one run.

    python3 train_traces.py --data CARRY --out OUT [--deadline 330] [--only NAME] [--tiny]

The shapes (n_layer x n_expert, top-k, gating) are the real models'; the width is narrow so each
model trains in about a minute on one H200:

  gpt-oss-20b    24 x  32, top-4, router with bias, softmax over the selected logits (gpt-oss)
  gpt-oss-120b   36 x 128, top-4, the same gating
  qwen3-30b-a3b  48 x 128, top-8, softmax over all experts, top-k renormalised (qwen3moe,
                 norm_topk_prob), no router bias

Each model: pre-norm transformer blocks (RMSNorm, causal attention with RoPE through
F.scaled_dot_product_attention, then the MoE FFN with SwiGLU experts), tied nothing, trained with
AdamW on the carried corpus (code + English, make_trace_corpus.py) with a Switch-style load
balancing loss (weight 0.01), bf16 autocast, sequences of 512 tokens, for its share of the time
budget. Then the 8 carried prompts (256 tokens each) run as one batch: the routing of every
prompt token is recorded as "prefill", then 256 tokens are sampled (temperature 0.8, top-k 50,
fixed seed) and the routing of each sampled token, evaluated at its position, as "decode"
(the whole sequence is recomputed per step; the model is causal, so a position's routing is
what an incremental decoder with a KV cache computes, up to rounding).

Writes to OUT: trace-<name>.jsonl.gz (one line per (prompt, position, layer): problem_id,
token_idx, layer, experts in router order, gating_probs, phase) and traces.json (settings, loss
curves, held-out loss, timings, a sample of each model's text).
"""
import argparse
import gzip
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

MODELS = [
    dict(name="gpt-oss-20b", n_layer=24, n_expert=32, k=4, gating="softmax_selected", bias=True, n_embd=256, n_ff=128, n_head=4),
    dict(name="gpt-oss-120b", n_layer=36, n_expert=128, k=4, gating="softmax_selected", bias=True, n_embd=192, n_ff=96, n_head=3),
    dict(name="qwen3-30b-a3b", n_layer=48, n_expert=128, k=8, gating="softmax_all", bias=False, n_embd=128, n_ff=64, n_head=2),
]
VOCAB = 8192
GROUPED_MM = None


def probe_grouped_mm(dev):
    """torch._grouped_mm when it exists here and matches a plain loop (values and gradients)."""
    global GROUPED_MM
    GROUPED_MM = False
    if dev.type != "cuda" or not hasattr(torch, "_grouped_mm"):
        return "loop (no torch._grouped_mm)"
    try:
        g = torch.Generator(device="cpu").manual_seed(0)
        counts = [5, 0, 17, 3, 40, 1, 0, 30]
        xs = torch.randn(sum(counts), 128, generator=g).to(dev, torch.bfloat16).requires_grad_()
        w = torch.randn(len(counts), 128, 64, generator=g).to(dev, torch.bfloat16).requires_grad_()
        offs = torch.cumsum(torch.tensor(counts, device=dev), 0).to(torch.int32)
        res = []
        for mode in (False, True):
            GROUPED_MM = mode
            xs.grad = w.grad = None
            y = expert_matmul(xs, w, counts, offs)
            y.float().square().sum().backward()
            res.append((y.detach().float(), xs.grad.float(), w.grad.float()))
        GROUPED_MM = all(torch.allclose(a, b, rtol=2e-2, atol=2e-2 * b.abs().max().item()) for a, b in zip(res[0], res[1]))
        return "torch._grouped_mm" if GROUPED_MM else "loop (torch._grouped_mm disagreed)"
    except Exception as e:  # noqa: BLE001 - any failure: the loop
        GROUPED_MM = False
        return f"loop (torch._grouped_mm failed: {type(e).__name__})"


def expert_matmul(xs, w, counts, offs):
    """Rows of xs [M, K] sorted by expert, times w[e] [K, N] for their expert e."""
    if GROUPED_MM:
        return torch._grouped_mm(xs, w, offs=offs)
    if counts is None:
        counts = torch.diff(offs, prepend=offs.new_zeros(1)).tolist()
    outs, start = [], 0
    for e, c in enumerate(counts):
        if c:
            outs.append(xs[start:start + c] @ w[e])
        start += c
    return torch.cat(outs, 0)


class RMSNorm(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))

    def forward(self, x):
        xf = x.float()
        return (self.weight * xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)


def rope(x, cos, sin):
    a, b = torch.chunk(x, 2, dim=-1)
    return torch.cat((a * cos - b * sin, b * cos + a * sin), dim=-1)


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.h, self.hd = c["n_head"], c["n_embd"] // c["n_head"]
        self.qkv = nn.Linear(c["n_embd"], 3 * c["n_embd"], bias=False)
        self.o = nn.Linear(c["n_embd"], c["n_embd"], bias=False)

    def forward(self, x, cos, sin):
        B, T, D = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.h, self.hd).permute(2, 0, 3, 1, 4)
        q, k = rope(q, cos, sin).to(v.dtype), rope(k, cos, sin).to(v.dtype)  # cos/sin are f32: one dtype for SDPA
        if hasattr(F, "scaled_dot_product_attention"):
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # torch < 2.0 (the CPU smoke test on a development machine)
            s = (q @ k.transpose(-2, -1)).float() * self.hd ** -0.5
            s = s.masked_fill(torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1), float("-inf"))
            y = torch.softmax(s, -1).to(v.dtype) @ v
        return self.o(y.transpose(1, 2).reshape(B, T, D))


class MoE(nn.Module):
    def __init__(self, c):
        super().__init__()
        E, d, f = c["n_expert"], c["n_embd"], c["n_ff"]
        self.E, self.k, self.gating = E, c["k"], c["gating"]
        self.router = nn.Linear(d, E, bias=c["bias"])
        self.gate_up = nn.Parameter(torch.randn(E, d, 2 * f) * 0.02)
        self.down = nn.Parameter(torch.randn(E, f, d) * 0.02)
        self.capture = None  # a list: (ids [B, T, k], weights [B, T, k]) are appended per forward

    def route(self, x):
        with torch.autocast(device_type=x.device.type, enabled=False):  # the router in f32, as the real models run it
            logits = F.linear(x.float(), self.router.weight.float(),
                              None if self.router.bias is None else self.router.bias.float())
        if self.gating == "softmax_all":  # qwen3moe: softmax over all, top-k, renormalised
            probs = torch.softmax(logits, dim=-1)
            top_v, top_i = torch.topk(probs, self.k, dim=-1)
            w = top_v / top_v.sum(-1, keepdim=True)
        else:  # gpt-oss: top-k of the (biased) logits, softmax over the selected
            top_v, top_i = torch.topk(logits, self.k, dim=-1)
            w = torch.softmax(top_v, dim=-1)
            probs = torch.softmax(logits, dim=-1)
        return top_i, w, probs

    def forward(self, x, stats):
        B, T, d = x.shape
        x2 = x.reshape(-1, d)
        top_i, w, probs = self.route(x2)
        if self.capture is not None:  # kept on the device: a copy to the host here would stall the queue every layer
            self.capture.append((top_i.view(B, T, self.k).to(torch.int16), w.view(B, T, self.k).float()))
        flat = top_i.reshape(-1)
        order = torch.argsort(flat, stable=True)
        tok = order // self.k
        # Tokens per expert without a host synchronisation (torch.bincount reads its input's maximum
        # back to the host to size its output: a stall per layer, most of a step's time at 48 layers).
        cnt = torch.zeros(self.E, device=x.device, dtype=torch.float32).scatter_add_(
            0, flat, torch.ones(flat.shape, device=x.device, dtype=torch.float32))
        offs = torch.cumsum(cnt, 0).to(torch.int32)
        counts = None if GROUPED_MM else [int(c) for c in cnt.tolist()]
        dt = torch.bfloat16 if torch.is_autocast_enabled() else x.dtype
        xs = x2[tok].to(dt)
        gu = expert_matmul(xs, self.gate_up.to(dt), counts, offs)
        g, u = gu.chunk(2, dim=-1)
        y = expert_matmul(F.silu(g) * u, self.down.to(dt), counts, offs)
        y = y.float() * w.reshape(-1)[order, None]
        out = torch.zeros(x2.shape[0], d, device=x.device, dtype=torch.float32).index_add_(0, tok, y)
        if stats is not None:  # Switch transformer balance loss: E * sum_e f_e * P_e
            stats.append(self.E * ((cnt / flat.numel()) * probs.mean(0)).sum())
        return out.to(x.dtype).view(B, T, d)


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.n1, self.attn, self.n2, self.moe = RMSNorm(c["n_embd"]), Attention(c), RMSNorm(c["n_embd"]), MoE(c)

    def forward(self, x, cos, sin, stats):
        x = x + self.attn(self.n1(x), cos, sin)
        return x + self.moe(self.n2(x), stats)


class Net(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.emb = nn.Embedding(VOCAB, c["n_embd"])
        self.blocks = nn.ModuleList([Block(c) for _ in range(c["n_layer"])])
        self.norm = RMSNorm(c["n_embd"])
        self.head = nn.Linear(c["n_embd"], VOCAB, bias=False)
        hd = c["n_embd"] // c["n_head"]
        self.register_buffer("inv_freq", 1.0 / (10000.0 ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd)), persistent=False)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
                if getattr(m, "bias", None) is not None:
                    nn.init.zeros_(m.bias)

    def forward(self, ids, stats=None):
        T = ids.shape[1]
        fr = torch.outer(torch.arange(T, device=ids.device, dtype=torch.float32), self.inv_freq)
        cos, sin = fr.cos().to(self.emb.weight.dtype), fr.sin().to(self.emb.weight.dtype)
        x = self.emb(ids)
        for b in self.blocks:
            x = b(x, cos, sin, stats)
        return self.head(self.norm(x))

    def set_capture(self, on):
        for b in self.blocks:
            b.moe.capture = [] if on else None


@torch.no_grad()
def eval_loss(model, tokens, T, dev, n_windows=64):
    model.eval()
    n = min(n_windows, (len(tokens) - 1) // T)
    x = torch.from_numpy(tokens[: n * T].astype(np.int64)).view(n, T).to(dev)
    y = torch.from_numpy(tokens[1: n * T + 1].astype(np.int64)).view(n, T).to(dev)
    with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda"):
        logits = model(x)
    model.train()
    return F.cross_entropy(logits.float().view(-1, VOCAB), y.view(-1)).item()


def train(c, train_t, heldout, dev, budget_s, args, log):
    torch.manual_seed(args.seed)
    model = Net(c).to(dev)
    n_params = sum(p.numel() for p in model.parameters())
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}], lr=args.lr,
                            betas=(0.9, 0.95), **({"fused": True} if dev.type == "cuda" else {}))
    gen = torch.Generator(device="cpu").manual_seed(args.seed + 1)
    B, T = args.batch, args.seq
    ar = torch.arange(T + 1, device=dev)
    t0 = time.time()
    step, total, curve = 0, 0, []
    warm = 30
    while True:
        if total and step >= total:
            break
        if time.time() - t0 > (budget_s if not total else 1.1 * budget_s):
            break  # slower than calibrated: the budget (+10% after calibration) is a hard stop
        if not total and step == 40:
            # Fix the schedule length from the speed of steps 20..39, before the warm-up ends
            # (so the learning rates so far do not depend on it).
            per = (time.time() - t_cal) / 20
            total = max(60, 40 + int((budget_s - (time.time() - t0)) / per))
            log.setdefault("calibrated_step_s", {})[c["name"]] = per
        if step == 20:
            if dev.type == "cuda":
                torch.cuda.synchronize()
            t_cal = time.time()
        s_total = total or 10 ** 6
        lr = args.lr * (step + 1) / warm if step < warm else \
            args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, (step - warm) / max(1, s_total - warm)))))
        for g in opt.param_groups:
            g["lr"] = lr
        off = torch.randint(0, len(train_t) - T - 1, (B,), generator=gen).to(dev)
        seq = train_t[off[:, None] + ar[None, :]]
        stats = []
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda"):
            logits = model(seq[:, :-1], stats)
        ce = F.cross_entropy(logits.float().view(-1, VOCAB), seq[:, 1:].reshape(-1))
        aux = torch.stack(stats).mean()
        opt.zero_grad(set_to_none=True)
        (ce + args.aux * aux).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if step % 25 == 0 or step == 1:
            rec = {"step": step, "loss": round(ce.item(), 4), "aux": round(aux.item(), 4), "lr": lr, "time_s": round(time.time() - t0, 1)}
            curve.append(rec)
            print(c["name"], json.dumps(rec), flush=True)
    train_s = time.time() - t0
    val = eval_loss(model, heldout, T, dev)
    info = {"n_params": n_params, "steps": step, "tokens_seen": step * B * T, "train_s": round(train_s, 1),
            "heldout_loss": round(val, 4), "heldout_ppl": round(math.exp(val), 2), "curve": curve}
    print(c["name"], "trained", json.dumps({k: v for k, v in info.items() if k != "curve"}), flush=True)
    return model, info


@torch.no_grad()
def capture(model, prompts, dev, args):
    """Routing of the prompts (prefill) and of args.decode sampled tokens (decode), per layer."""
    model.eval()
    ids = torch.tensor([p["ids"] for p in prompts], dtype=torch.int64, device=dev)
    P, T0 = ids.shape
    gen = torch.Generator(device=dev).manual_seed(args.seed + 2)
    L = len(model.blocks)
    prefill = decode = None
    ac = dict(device_type=dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda")
    model.set_capture(True)
    with torch.autocast(**ac):
        logits = model(ids)
    prefill = [tuple(t.cpu() for t in model.blocks[l].moe.capture[0]) for l in range(L)]  # per layer: ([P, T0, k], [P, T0, k])
    dec_ids, dec_w = [[] for _ in range(L)], [[] for _ in range(L)]
    for _ in range(args.decode):
        lg = logits[:, -1, :].float() / args.temperature
        v, i = torch.topk(lg, args.top_k, dim=-1)
        nxt = i.gather(1, torch.multinomial(torch.softmax(v, -1), 1, generator=gen))
        ids = torch.cat([ids, nxt], 1)
        model.set_capture(True)
        with torch.autocast(**ac):
            logits = model(ids)
        for l in range(L):
            a, w = model.blocks[l].moe.capture[0]
            dec_ids[l].append(a[:, -1:, :].clone())  # the last position only (a view would keep the whole step)
            dec_w[l].append(w[:, -1:, :].clone())
    model.set_capture(False)
    decode = [(torch.cat(dec_ids[l], 1).cpu(), torch.cat(dec_w[l], 1).cpu()) for l in range(L)]
    return prefill, decode, ids[:, T0:].cpu().tolist()


def write_trace(path, prefill, decode):
    L = len(prefill)
    P, T0, _ = prefill[0][0].shape
    D = decode[0][0].shape[1]
    pi = [x[0].numpy() for x in prefill]
    pw = [x[1].numpy() for x in prefill]
    di = [x[0].numpy() for x in decode]
    dw = [x[1].numpy() for x in decode]
    n = 0
    with gzip.open(path, "wt", compresslevel=9) as f:
        for p in range(P):
            for t in range(T0 + D):
                ph = "prefill" if t < T0 else "decode"
                for l in range(L):
                    if t < T0:
                        e, w = pi[l][p, t], pw[l][p, t]
                    else:
                        e, w = di[l][p, t - T0], dw[l][p, t - T0]
                    f.write('{"problem_id":%d,"token_idx":%d,"layer":%d,"experts":[%s],"gating_probs":[%s],"phase":"%s"}\n' % (
                        p, t, l, ",".join(str(int(x)) for x in e), ",".join("%.5f" % float(x) for x in w), ph))
                    n += 1
    return n


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="train.u16, heldout.u16, prompts.json (make_trace_corpus.py)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--deadline", type=float, default=300.0, help="seconds for the whole run, training and capture")
    ap.add_argument("--capture-reserve", type=float, default=30.0, help="seconds kept per model for its capture")
    ap.add_argument("--only", default="", help="train only this model (name)")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--aux", type=float, default=0.01)
    ap.add_argument("--decode", type=int, default=256, help="sampled tokens per prompt")
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--top-k", type=int, default=50)
    ap.add_argument("--seed", type=int, default=4321)
    ap.add_argument("--tiny", action="store_true", help="CPU smoke test: 2 layers, width 32, 16 decode tokens, 4 s each")
    args = ap.parse_args()
    t_start = time.time()
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    mm = probe_grouped_mm(dev)
    print(f"device {dev} ({torch.cuda.get_device_name() if dev.type == 'cuda' else 'cpu'}), torch {torch.__version__}, experts via {mm}",
          flush=True)
    os.makedirs(args.out, exist_ok=True)
    train_np = np.fromfile(os.path.join(args.data, "train.u16"), dtype="<u2")
    heldout = np.fromfile(os.path.join(args.data, "heldout.u16"), dtype="<u2")
    pj = json.load(open(os.path.join(args.data, "prompts.json")))
    prompts = pj["prompts"]
    train_t = torch.from_numpy(train_np.astype(np.int64)).to(dev)
    models = [dict(m) for m in MODELS if not args.only or m["name"] == args.only]
    if args.tiny:
        for m in models:
            m.update(n_layer=2, n_embd=32, n_ff=16, n_head=1)
        args.decode, args.batch, args.seq = 16, 4, 64
    try:
        from tokenizers import Tokenizer  # for the text samples only
        tok = Tokenizer.from_file(os.path.join(args.data, "tokenizer.json"))
    except Exception:  # noqa: BLE001
        tok = None
    log = {"args": vars(args), "experts_matmul": mm, "torch": torch.__version__, "corpus_sha256": pj.get("corpus_sha256"),
           "tokens": {"train": int(len(train_np)), "heldout": int(len(heldout))},
           "prompts": [{"name": p["name"], "kind": p["kind"], "tokens": len(p["ids"])} for p in prompts], "models": {}}
    for i, c in enumerate(models):
        # The training time left, shared in proportion to n_layer (a step costs about that much), after
        # the capture time kept for this model and the ones after it.
        left = args.deadline - (time.time() - t_start) - args.capture_reserve * (len(models) - i)
        share = c["n_layer"] / sum(m["n_layer"] for m in models[i:])
        budget = 4.0 if args.tiny else max(20.0, left * share)
        print(f"== {c['name']}: {c['n_layer']} x {c['n_expert']}, top-{c['k']}, {c['gating']}; training for {budget:.0f} s", flush=True)
        model, info = train(c, train_t, heldout, dev, budget, args, log)
        t0 = time.time()
        prefill, decode, sampled = capture(model, prompts, dev, args)
        path = os.path.join(args.out, f"trace-{c['name']}.jsonl.gz")
        info["trace_records"] = write_trace(path, prefill, decode)
        info["capture_s"] = round(time.time() - t0, 1)
        info["shape"] = {k: c[k] for k in ("n_layer", "n_expert", "k", "gating", "bias", "n_embd", "n_ff", "n_head")}
        if tok is not None:
            info["samples"] = [{"prompt": p["name"], "kind": p["kind"], "text": tok.decode(s[:96])} for p, s in zip(prompts, sampled)]
        log["models"][c["name"]] = info
        log["total_s"] = round(time.time() - t_start, 1)
        json.dump(log, open(os.path.join(args.out, "traces.json"), "w"), indent=1)  # after each model: a timeout keeps the rest
        print(c["name"], f"trace: {info['trace_records']} records in {info['capture_s']} s -> {path}", flush=True)
        del model, prefill, decode
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    log["total_s"] = round(time.time() - t_start, 1)
    json.dump(log, open(os.path.join(args.out, "traces.json"), "w"), indent=1)
    print(f"done in {log['total_s']} s", flush=True)


if __name__ == "__main__":
    sys.exit(main())
