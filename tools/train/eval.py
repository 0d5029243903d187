#!/usr/bin/env python3
"""Evaluates the trained model with transformers' GptOssForCausalLM (the reference gpt-oss math).

    python3 eval.py --hf DIR --data DIR --out DIR [--gguf FILE]

1. Loads DIR (model.safetensors + config.json from train.py) into GptOssForCausalLM (float32,
   eager attention) and compares its logits with train.py's own forward on held-out windows.
2. Held-out ("test" half) perplexity with transformers.
3. Greedy completions of a few code and prose prompts (transformers, full recompute per step).
4. With --gguf: reads the GGUF that `nitro convert` wrote, dequantizes every tensor (MXFP4,
   Q8_0, F16, F32 as ggml does), maps llama.cpp's names back to transformers' (undoing the
   gate/up split and the expert transposes) and runs transformers on exactly the weights nitro
   runs. Records, for each prompt, the greedy continuation and the teacher-forced top-5 at every
   position: the golden data tests/golden/embedded_model.json that nitro is tested against.
   Also reports how often the quantized and the float model agree on the next token.
Writes eval.json (and golden.json) to --out.
"""
import argparse
import json
import math
import os
import struct
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train as T  # noqa: E402

PROMPTS = [
    ("code", "def fibonacci(n):\n"),
    ("code", "import os\nimport sys\n\n\ndef main():\n"),
    ("code", "class Stack:\n    \"\"\"A last-in, first-out stack.\"\"\"\n\n    def __init__(self):\n"),
    ("code", "    def __repr__(self):\n        return"),
    ("prose", "The :mod:`os` module provides"),
    ("prose", "A list comprehension is"),
    ("prose", "Python is an interpreted, interactive, object-oriented programming language"),
]
N_NEW = 48


def load_hf(cfg_dir, state):
    from transformers import GptOssConfig, GptOssForCausalLM
    cfg = json.load(open(os.path.join(cfg_dir, "config.json")))
    kw = {k: v for k, v in cfg.items() if k not in ("architectures", "model_type", "torch_dtype")}
    try:
        c = GptOssConfig(**kw)
    except Exception as e:  # noqa: BLE001 - keep only the fields this transformers version declares
        fields = set(getattr(GptOssConfig, "__dataclass_fields__", {})) or set(GptOssConfig.__init__.__code__.co_varnames)
        print(f"GptOssConfig rejected the full config ({e}); retrying with its declared fields", flush=True)
        c = GptOssConfig(**{k: v for k, v in kw.items() if k in fields})
    try:
        m = GptOssForCausalLM._from_config(c, attn_implementation="eager")
    except Exception:  # noqa: BLE001 - older/newer signature
        c._attn_implementation = "eager"
        m = GptOssForCausalLM(c)
    params = dict(m.named_parameters())
    missing, unexpected = m.load_state_dict(state, strict=False)
    missing_params = [k for k in missing if k in params]
    if missing_params or unexpected:
        raise RuntimeError(f"state dict mismatch: missing {missing_params[:5]}, unexpected {unexpected[:5]}")
    rot = m.model.rotary_emb
    info = {"rope_type": getattr(rot, "rope_type", "?"), "attention_scaling": float(getattr(rot, "attention_scaling", 1.0)),
            "layer_types": list(getattr(c, "layer_types", [])), "sliding_window": c.sliding_window,
            "attn_implementation": getattr(c, "_attn_implementation", "?"), "missing_buffers": list(missing)}
    import transformers
    info["transformers"] = transformers.__version__
    return m.float().eval(), info


@torch.no_grad()
def logits_of(model, ids, dev):
    x = torch.tensor([ids], device=dev)
    out = model(x)
    return (out.logits if hasattr(out, "logits") else out)[0].float()


@torch.no_grad()
def greedy(model, ids, n, dev):
    ids = list(ids)
    out = []
    for _ in range(n):
        nxt = int(logits_of(model, ids + out, dev)[-1].argmax())
        out.append(nxt)
    return out


# ---- GGUF reading (the subset nitro convert writes) -------------------------------------------
GGUF_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
KVALUES_MXFP4 = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], dtype=np.float32)


def read_gguf(path):
    buf = open(path, "rb").read()
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from(fmt, buf, pos)
        pos += struct.calcsize(fmt)
        return v[0]

    def string():
        nonlocal pos
        n = take("<Q")
        s = buf[pos:pos + n].decode("utf-8")
        pos += n
        return s

    def value(t):
        if t == 8:
            return string()
        if t == 9:
            et, n = take("<I"), take("<Q")
            return [value(et) for _ in range(n)]
        return take(GGUF_SCALAR[t])

    assert buf[:4] == b"GGUF"
    pos = 4
    take("<I")
    nt, nkv = take("<Q"), take("<Q")
    meta = {}
    for _ in range(nkv):
        k = string()
        meta[k] = value(take("<I"))
    infos = []
    for _ in range(nt):
        name = string()
        nd = take("<I")
        ne = [take("<Q") for _ in range(nd)]
        infos.append((name, ne, take("<I"), take("<Q")))
    align = meta.get("general.alignment", 32)
    base = (pos + align - 1) // align * align
    tensors = {}
    for name, ne, typ, off in infos:
        n = int(np.prod(ne))
        p = base + off
        if typ == 0:
            a = np.frombuffer(buf, dtype="<f4", count=n, offset=p)
        elif typ == 1:
            a = np.frombuffer(buf, dtype="<f2", count=n, offset=p).astype(np.float32)
        elif typ == 8:  # Q8_0: fp16 d, 32 x int8
            blk = np.frombuffer(buf, dtype=np.uint8, count=n // 32 * 34, offset=p).reshape(-1, 34)
            d = blk[:, :2].copy().view("<f2").astype(np.float32)
            q = blk[:, 2:].view(np.int8).astype(np.float32)
            a = (q * d).reshape(-1)
        elif typ == 39:  # MXFP4: e8m0 scale (2^(e-128) as ggml's half scale), 16 bytes of nibbles
            blk = np.frombuffer(buf, dtype=np.uint8, count=n // 32 * 17, offset=p).reshape(-1, 17)
            d = np.ldexp(np.float32(1.0), blk[:, 0].astype(np.int32) - 128).astype(np.float32)[:, None]
            qs = blk[:, 1:]
            lo, hi = KVALUES_MXFP4[qs & 15], KVALUES_MXFP4[qs >> 4]
            a = (np.concatenate([lo, hi], axis=1) * d).reshape(-1)
        else:
            raise ValueError(f"{name}: ggml type {typ} not handled")
        tensors[name] = a.reshape(list(reversed(ne))).astype(np.float32)
    return meta, tensors


def gguf_to_hf(g, cfg):
    """llama.cpp names/layouts -> transformers' gpt-oss state dict (inverse of nitro convert)."""
    sd = {"model.embed_tokens.weight": g["token_embd.weight"], "model.norm.weight": g["output_norm.weight"],
          "lm_head.weight": g["output.weight"]}
    for i in range(cfg["num_hidden_layers"]):
        b, p = f"blk.{i}.", f"model.layers.{i}."
        sd[p + "input_layernorm.weight"] = g[b + "attn_norm.weight"]
        sd[p + "post_attention_layernorm.weight"] = g[b + "post_attention_norm.weight"]
        for x, y in (("q", "q"), ("k", "k"), ("v", "v"), ("output", "o")):
            sd[p + f"self_attn.{y}_proj.weight"] = g[b + f"attn_{x}.weight"]
            sd[p + f"self_attn.{y}_proj.bias"] = g[b + f"attn_{x}.bias"]
        sd[p + "self_attn.sinks"] = g[b + "attn_sinks.weight"]
        sd[p + "mlp.router.weight"] = g[b + "ffn_gate_inp.weight"]
        sd[p + "mlp.router.bias"] = g[b + "ffn_gate_inp.bias"]
        gate, up = g[b + "ffn_gate_exps.weight"], g[b + "ffn_up_exps.weight"]  # [X, F, E]
        X, Fx, E = gate.shape
        gu = np.empty((X, E, 2 * Fx), dtype=np.float32)
        gu[:, :, 0::2] = gate.transpose(0, 2, 1)
        gu[:, :, 1::2] = up.transpose(0, 2, 1)
        sd[p + "mlp.experts.gate_up_proj"] = gu
        gub = np.empty((X, 2 * Fx), dtype=np.float32)
        gub[:, 0::2] = g[b + "ffn_gate_exps.bias"]
        gub[:, 1::2] = g[b + "ffn_up_exps.bias"]
        sd[p + "mlp.experts.gate_up_proj_bias"] = gub
        sd[p + "mlp.experts.down_proj"] = g[b + "ffn_down_exps.weight"].transpose(0, 2, 1)  # [X, E, F] -> [X, F, E]
        sd[p + "mlp.experts.down_proj_bias"] = g[b + "ffn_down_exps.bias"]
    return {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in sd.items()}


def topk_rows(logits, k=5):
    lp = torch.log_softmax(logits, -1)
    v, i = torch.topk(logits, k, dim=-1)
    return [{"ids": i[r].tolist(), "logits": [round(x, 4) for x in v[r].tolist()],
             "logprobs": [round(x, 4) for x in lp[r, i[r]].tolist()]} for r in range(logits.shape[0])]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hf", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--gguf", default="")
    args = ap.parse_args()
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.backends.cuda.matmul.allow_tf32 = False
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(args.data, "tokenizer.json"))
    res = {}
    t0 = time.time()
    cfg = json.load(open(os.path.join(args.hf, "config.json")))
    from safetensors.torch import load_file
    state = load_file(os.path.join(args.hf, "model.safetensors"))

    hf, info = load_hf(args.hf, state)
    hf.to(dev)
    res["hf_model"] = info
    # 1. train.py's forward vs transformers on the same weights (float32, no autocast)
    tcfg = {k: cfg[k] for k in T.CONFIG if k in cfg}
    tcfg["rope_theta"] = cfg["rope_parameters"]["rope_theta"]
    net = T.Net(tcfg)
    net.load_state_dict(state)
    net.to(dev).eval()
    heldout = np.fromfile(os.path.join(args.data, "heldout.u16"), dtype="<u2")
    meta_tok = json.load(open(os.path.join(args.data, "tokens.json")))
    val, test = T.heldout_splits(heldout, meta_tok["eot"])
    win = cfg["max_position_embeddings"]
    x = torch.from_numpy(test[: 2 * win].astype(np.int64)).view(2, win).to(dev)
    with torch.no_grad():
        a = net(x).float()
        b = hf(x).logits.float()
    res["train_forward_vs_transformers"] = {
        "max_abs_logit_diff": float((a - b).abs().max()), "logit_rms": float(b.pow(2).mean().sqrt()),
        "top1_agreement": float((a.argmax(-1) == b.argmax(-1)).float().mean())}
    print("train forward vs transformers:", res["train_forward_vs_transformers"], flush=True)

    # 2. held-out perplexity with transformers, float32
    tl, tn = T.eval_loss(hf_wrap(hf), test, win, dev, batch=8, autocast=False)
    vl, vn = T.eval_loss(hf_wrap(hf), val, win, dev, batch=8, autocast=False)
    res["heldout"] = {"test_loss": tl, "test_ppl": math.exp(tl), "test_tokens": tn, "val_loss": vl,
                      "val_ppl": math.exp(vl), "val_tokens": vn, "window": win, "dtype": "float32"}
    hf.eval()
    print("held-out:", res["heldout"], flush=True)

    # 3. greedy samples (float weights)
    samples = []
    for kind, text in PROMPTS:
        ids = tok.encode(text, add_special_tokens=False).ids
        out = greedy(hf, ids, N_NEW, dev)
        samples.append({"kind": kind, "prompt": text, "prompt_ids": ids, "greedy_ids": out,
                        "completion": tok.decode(out, skip_special_tokens=False)})
        print(f"--- {kind}: {text!r}\n{tok.decode(out, skip_special_tokens=False)!r}", flush=True)
    res["samples_float"] = samples

    # 4. the GGUF's own weights through transformers: golden data for nitro
    if args.gguf:
        meta, g = read_gguf(args.gguf)
        qstate = gguf_to_hf(g, cfg)
        qhf, _ = load_hf(args.hf, qstate)
        qhf.to(dev)
        ql, _ = T.eval_loss(hf_wrap(qhf), test, win, dev, batch=8, autocast=False)
        qhf.eval()
        res["heldout_gguf_weights"] = {"test_loss": ql, "test_ppl": math.exp(ql)}
        with torch.no_grad():
            fa = hf(x).logits.float().argmax(-1)
            fb = qhf(x).logits.float().argmax(-1)
        res["gguf_vs_float_top1_agreement"] = float((fa == fb).float().mean())
        print("GGUF weights: test ppl", math.exp(ql), "top-1 agreement with float", res["gguf_vs_float_top1_agreement"],
              flush=True)
        golden = {"model": os.path.basename(args.gguf), "reference": "transformers GptOssForCausalLM (float32, eager) "
                  "on the GGUF's dequantized weights", "n_predict": N_NEW, "cases": []}
        for kind, text in PROMPTS:
            ids = tok.encode(text, add_special_tokens=False).ids
            out = greedy(qhf, ids, N_NEW, dev)
            lg = logits_of(qhf, ids + out, dev)
            golden["cases"].append({"kind": kind, "prompt": text, "prompt_ids": ids, "greedy_ids": out,
                                    "completion": tok.decode(out, skip_special_tokens=False),
                                    "top5": topk_rows(lg[: len(ids) + len(out)])})
        json.dump(golden, open(os.path.join(args.out, "golden.json"), "w"), separators=(",", ":"))
        res["samples_gguf"] = [{k: c[k] for k in ("kind", "prompt", "completion")} for c in golden["cases"]]
    res["eval_time_s"] = round(time.time() - t0, 1)
    json.dump(res, open(os.path.join(args.out, "eval.json"), "w"), indent=1)


def hf_wrap(m):
    """Makes a transformers model look like train.Net for train.eval_loss (logits out)."""
    class W(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = m

        def forward(self, x):
            return self.m(x).logits
    return W()


if __name__ == "__main__":
    main()
