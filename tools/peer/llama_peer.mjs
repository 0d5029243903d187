#!/usr/bin/env node
// llama_peer.mjs: llama.cpp (node-llama-cpp 3.21.1 = llama.cpp 80fb11a, prebuilt CPU binaries) as a
// live peer for nitro. Loads a GGUF on the CPU and prints, as JSON, greedy generations with the
// top-K next-token probabilities at every step, and/or the top-K at every position of a
// teacher-forced sequence (so any sequence can be scored).
//
// Usage:
//   node llama_peer.mjs --model M.gguf --prompt-ids 1,2,3 [--n-predict 32] [--n-probs 5]
//                       [--teacher-forced-ids 4,5,6] [--threads 2] [--ctx 4096]
//   echo '{"model":"M.gguf","prompt_ids":[1,2,3],"n_predict":32,"n_probs":5}' | node llama_peer.mjs
//   echo '[{...},{...}]' | node llama_peer.mjs      # several requests; the model is loaded once per file
//
// A request is {model, prompt_ids, n_predict (default 0), n_probs (default 5), teacher_forced_ids
// (optional; an empty array scores the prompt alone), threads, ctx}. The reply (one object, or an
// array for an array of requests) is
//   {model, prompt_ids, ids: greedy generated ids, probs: [[{id, p, logprob}] x K per generated step],
//    teacher_forced: {ids: prompt+forced, probs: [[...] per position: top-K next after ids[0..i]]},
//    settings: {...}, llama_cpp: {commit, ggml_cpu_variant...}}
//
// Settings are those of the fixture goldens (../shared/fixtures/README.md, llama-server defaults):
// context 4096, flash attention "auto" (enabled on CPU), F16 K/V cache, SWA cache not full-size,
// the prompt evaluated as one batch (n_ubatch 512 like the server: prompts up to 512 tokens are one
// ubatch), then one token per step. Greedy = argmax of the raw logits. Probabilities are a softmax
// of the raw logits at temperature 1 over the whole vocabulary, computed in float by the addon
// exactly as llama-server computes `completion_probabilities` (sort by logit, exp(l - max), divide
// by the sum); logprob = ln(p).
//
// Never builds or downloads anything: getLlama({gpu: false, build: "never", skipDownload: true}).
// Any failure (peer not installed, model rejected) exits with status 1 and a message on stderr.
//
// CPU variant: ggml loads the best libggml-cpu-<variant>.so for the host. The peer never loads
// `sapphirerapids`, the one variant with AMX (AMX_TILE, AMX_INT8): on an AMX host its batched
// products differ from every other variant and from the goldens by far more than the variants
// differ from each other (gpt-oss fixture, `short`, teacher-forced step 0: a golden top-5 token
// falls out of its top-5, p 0.0157 -> below 0.0117, where x64, icelake and the goldens agree to
// 0.0002; MEASURED 2026-12-03, docs/peer.md). On such a host ggml takes the next best variant
// (AVX-512), so the peer's results do not depend on whether the host has AMX. The pin works by a
// mirror of the binaries package without that file (hard links, in node_modules) and a resolve
// hook (peer_bins_hook.mjs) that points node-llama-cpp's import of it at the mirror.
import { existsSync, linkSync, copyFileSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync } from "node:fs";
import { createRequire, register } from "node:module";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

/// CPU variants of the prebuilt binaries the peer must not load (see above).
const EXCLUDED_CPU_VARIANTS = ["libggml-cpu-sapphirerapids.so"];

const LLAMA_CPP_COMMIT = "80fb11ac73e66d89eae2c6a91d8a77428fa733ed";
const NODE_LLAMA_CPP_VERSION = "3.21.1";

function parseIds(s) {
    if (s === undefined || s === null) return undefined;
    if (Array.isArray(s)) return s.map(Number);
    const t = String(s).trim();
    if (t === "") return [];
    return t.split(",").map((x) => {
        const v = Number(x);
        if (!Number.isInteger(v) || v < 0) throw new Error(`bad token id '${x}'`);
        return v;
    });
}

function parseArgs(argv) {
    const r = {};
    const takes = new Set(["--model", "-m", "--prompt-ids", "--n-predict", "-n", "--n-probs", "--teacher-forced-ids",
                           "--threads", "-t", "--ctx", "--batch"]);
    for (let i = 0; i < argv.length; ++i) {
        const a = argv[i];
        if (a === "--help" || a === "-h") { r.help = true; continue; }
        if (!takes.has(a)) throw new Error(`unknown argument '${a}' (see --help)`);
        if (i + 1 >= argv.length) throw new Error(`${a} needs a value`);
        const v = argv[++i];
        switch (a) {
            case "--model": case "-m": r.model = v; break;
            case "--prompt-ids": r.prompt_ids = parseIds(v); break;
            case "--n-predict": case "-n": r.n_predict = Number(v); break;
            case "--n-probs": r.n_probs = Number(v); break;
            case "--teacher-forced-ids": r.teacher_forced_ids = parseIds(v); break;
            case "--threads": case "-t": r.threads = Number(v); break;
            case "--ctx": r.ctx = Number(v); break;
            case "--batch": r.batch = Number(v); break;
        }
    }
    return r;
}

/// The K most likely entries of a probabilities Map (already sorted by probability, highest first).
function topK(map, k) {
    const out = [];
    for (const [id, p] of map) {
        if (out.length >= k) break;
        out.push({ id, p, logprob: Math.log(p) });
    }
    return out;
}

function normalizeRequest(q) {
    if (typeof q !== "object" || q === null) throw new Error("a request must be a JSON object");
    if (!q.model) throw new Error("request without 'model'");
    const prompt_ids = parseIds(q.prompt_ids);
    if (!prompt_ids || prompt_ids.length === 0) throw new Error("request without 'prompt_ids' (at least one token)");
    const r = {
        model: q.model,
        prompt_ids,
        n_predict: q.n_predict ?? 0,
        n_probs: q.n_probs ?? 5,
        teacher_forced_ids: q.teacher_forced_ids === undefined ? undefined : parseIds(q.teacher_forced_ids),
        threads: q.threads ?? 2,
        ctx: q.ctx ?? 4096,
        batch: q.batch ?? 512,
    };
    for (const k of ["n_predict", "n_probs", "threads", "ctx", "batch"])
        if (!Number.isInteger(r[k]) || r[k] < 0) throw new Error(`'${k}' must be a non-negative integer, got ${q[k]}`);
    return r;
}

/// Copies dir `src` to `dst` (hard links where the file system allows, else copies), leaving out
/// the file names in `skip`.
function mirrorTree(src, dst, skip) {
    mkdirSync(dst, { recursive: true });
    for (const name of readdirSync(src)) {
        const a = path.join(src, name), b = path.join(dst, name);
        if (statSync(a).isDirectory()) mirrorTree(a, b, skip);
        else if (!skip.includes(name)) {
            try { linkSync(a, b); } catch { copyFileSync(a, b); }
        }
    }
}

/// On linux-x64: makes node-llama-cpp load its prebuilt binaries from a mirror without the excluded
/// CPU variants (built once, atomically, next to the original package). Elsewhere: nothing.
function pinCpuVariants(require) {
    if (process.platform !== "linux" || process.arch !== "x64") return;
    const pkgDir = path.dirname(path.dirname(require.resolve("@node-llama-cpp/linux-x64")));
    const version = JSON.parse(readFileSync(path.join(pkgDir, "package.json"), "utf8")).version;
    const mirror = path.join(path.dirname(pkgDir), `.nitro-peer-linux-x64-${version}`);
    if (!existsSync(path.join(mirror, "package.json"))) {
        // Built under a private name and renamed into place: peers started at once do not race.
        const tmp = `${mirror}.tmp-${process.pid}`;
        rmSync(tmp, { recursive: true, force: true });
        for (const part of ["dist", "bins"]) mirrorTree(path.join(pkgDir, part), path.join(tmp, part), EXCLUDED_CPU_VARIANTS);
        copyFileSync(path.join(pkgDir, "package.json"), path.join(tmp, "package.json"));
        try { renameSync(tmp, mirror); } catch { rmSync(tmp, { recursive: true, force: true }); }
    }
    register(pathToFileURL(path.join(path.dirname(fileURLToPath(import.meta.url)), "peer_bins_hook.mjs")), {
        data: { target: pathToFileURL(path.join(mirror, "dist", "index.js")).href },
    });
}

let llamaPromise = null;
export async function getPeerLlama() {
    if (!llamaPromise) {
        llamaPromise = (async () => {
            // The pinned version is what ties the peer to llama.cpp 80fb11a (the goldens' commit).
            const require = createRequire(import.meta.url);
            const pkg = JSON.parse(readFileSync(path.join(path.dirname(require.resolve("node-llama-cpp")), "..", "package.json"), "utf8"));
            if (pkg.version !== NODE_LLAMA_CPP_VERSION)
                throw new Error(`node-llama-cpp ${pkg.version} is installed, the peer needs ${NODE_LLAMA_CPP_VERSION} (run scripts/setup.sh)`);
            pinCpuVariants(require);
            const { getLlama, LlamaLogLevel } = await import("node-llama-cpp");
            const llama = await getLlama({
                gpu: false, build: "never", skipDownload: true, usePrebuiltBinaries: true, progressLogs: false,
                logLevel: LlamaLogLevel.error, maxThreads: 0,
            });
            return llama;
        })();
    }
    return llamaPromise;
}

async function withContext(model, q, fn) {
    const ctx = await model.createContext({
        contextSize: q.ctx, batchSize: q.batch, threads: q.threads, flashAttention: "auto", swaFullCache: false,
        sequences: 1,
    });
    try {
        return await fn(ctx.getSequence());
    } finally {
        await ctx.dispose();
    }
}

/// Greedy generation: the prompt as one batch, then one token per step; top-K at every step.
async function greedy(model, q) {
    if (q.prompt_ids.length + q.n_predict > q.ctx) throw new Error(`prompt + n_predict exceeds the context (${q.ctx})`);
    if (q.prompt_ids.length > q.batch) throw new Error(`prompt longer than the batch (${q.batch}): it would not be one batch`);
    return withContext(model, q, async (seq) => {
        const ids = [], probs = [];
        let input = q.prompt_ids;
        for (let step = 0; step < q.n_predict; ++step) {
            const items = input.map((t, i) => i === input.length - 1
                ? [t, { generateNext: { token: true, probabilities: true, options: { temperature: 0 } } }]
                : t);
            const res = await seq.controlledEvaluate(items);
            const next = res[input.length - 1]?.next;
            if (!next || next.token == null || !next.probabilities) throw new Error(`no output at generation step ${step}`);
            ids.push(next.token);
            probs.push(topK(next.probabilities, q.n_probs));
            input = [next.token];
        }
        return { ids, probs };
    });
}

/// Teacher forcing: prompt + forced ids as one batch, top-K next-token probabilities at every position.
async function teacherForced(model, q) {
    const seqIds = [...q.prompt_ids, ...q.teacher_forced_ids];
    if (seqIds.length > q.batch) throw new Error(`teacher-forced sequence longer than the batch (${q.batch})`);
    return withContext(model, q, async (seq) => {
        const items = seqIds.map((t) => [t, { generateNext: { probabilities: true } }]);
        const res = await seq.controlledEvaluate(items);
        const probs = seqIds.map((_, i) => {
            const p = res[i]?.next?.probabilities;
            if (!p) throw new Error(`no probabilities at teacher-forced position ${i}`);
            return topK(p, q.n_probs);
        });
        return { ids: seqIds, probs };
    });
}

export async function runRequests(requests) {
    const llama = await getPeerLlama();
    const models = new Map();
    const out = [];
    try {
        for (const raw of requests) {
            const q = normalizeRequest(raw);
            let model = models.get(q.model);
            if (!model) {
                model = await llama.loadModel({ modelPath: q.model, gpuLayers: 0, useMmap: true });
                models.set(q.model, model);
            }
            // llama.cpp only logs an out-of-range id and fails the whole evaluation ("Eval has failed").
            const vocab = model.fileInfo?.metadata?.tokenizer?.ggml?.tokens?.length;
            if (!Number.isInteger(vocab) || vocab <= 0) throw new Error(`'${q.model}': no tokenizer.ggml.tokens`);
            for (const id of [...q.prompt_ids, ...(q.teacher_forced_ids ?? [])])
                if (id >= vocab) throw new Error(`token id ${id} is outside the vocabulary of '${q.model}' (${vocab} tokens)`);
            const r = { model: q.model, prompt_ids: q.prompt_ids };
            if (q.n_predict > 0 || q.teacher_forced_ids === undefined) Object.assign(r, await greedy(model, q));
            if (q.teacher_forced_ids !== undefined) r.teacher_forced = await teacherForced(model, q);
            r.settings = {
                n_ctx: q.ctx, n_batch: q.batch, threads: q.threads, flash_attention: "auto", kv_cache: "f16",
                swa_full: false, n_probs: q.n_probs, n_predict: q.n_predict,
            };
            r.llama_cpp = { commit: LLAMA_CPP_COMMIT, node_llama_cpp: NODE_LLAMA_CPP_VERSION, build: llama.buildType,
                            cpu_math_cores: llama.cpuMathCores };
            out.push(r);
        }
    } finally {
        for (const m of models.values()) await m.dispose();
    }
    return out;
}

async function main() {
    const args = parseArgs(process.argv.slice(2));
    if (args.help) {
        process.stdout.write(readFileSync(fileURLToPath(import.meta.url), "utf8").split("\nimport ")[0] + "\n");
        return;
    }
    let input, single = true;
    if (Object.keys(args).length > 0) {
        input = [args];
    } else {
        const text = readFileSync(0, "utf8");
        const parsed = JSON.parse(text);
        single = !Array.isArray(parsed);
        input = single ? [parsed] : parsed;
    }
    const out = await runRequests(input);
    // Wait until the reply is flushed: stdout to a pipe is asynchronous, and exiting early cuts it.
    await new Promise((resolve, reject) =>
        process.stdout.write(JSON.stringify(single ? out[0] : out) + "\n", (e) => (e ? reject(e) : resolve())));
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
    main().then(() => process.exit(0), (e) => {
        process.stderr.write(`llama_peer: error: ${e && e.message ? e.message : e}\n`);
        process.exit(1);
    });
}
