#!/usr/bin/env node
// llama_bench.mjs: llama.cpp's CPU speed on a GGUF, measured like `nitro bench` (same prompt
// length, same number of generated tokens, same threads), through node-llama-cpp 3.21.1's
// prebuilt CPU build of llama.cpp 80fb11a. Prints one JSON object:
//   {"prompt_tokens","prompt_tok_s","gen_tokens","decode_tok_s","threads","llama_cpp_commit"}
// Usage: node tools/peer/llama_bench.mjs --model M.gguf [--threads 2] [--n-prompt 128] [--n-gen 32]
import { getPeerLlama } from "./llama_peer.mjs";

function arg(name, def) {
    const i = process.argv.indexOf(name);
    return i >= 0 && i + 1 < process.argv.length ? process.argv[i + 1] : def;
}

const modelPath = arg("--model");
if (!modelPath) { console.error("llama_bench: --model is required"); process.exit(1); }
const threads = Number(arg("--threads", "2"));
const nPrompt = Number(arg("--n-prompt", "128"));
const nGen = Number(arg("--n-gen", "32"));

try {
    const llama = await getPeerLlama();
    const model = await llama.loadModel({ modelPath, gpuLayers: 0, useMmap: true });
    const ctx = await model.createContext({ contextSize: nPrompt + nGen + 16, batchSize: Math.max(512, nPrompt),
                                            threads, flashAttention: "auto", sequences: 1 });
    const seq = ctx.getSequence();
    // Same pseudo-random prompt policy as nitro bench: ids below 1000.
    let x = 1;
    const prompt = Array.from({ length: nPrompt }, () => { x = (x * 1103515245 + 12345) % 2147483648; return x % 1000; });
    let t = performance.now();
    const items = prompt.map((tok, i) => i === prompt.length - 1 ? [tok, { generateNext: { token: true, options: { temperature: 0 } } }] : tok);
    let res = await seq.controlledEvaluate(items);
    const promptMs = performance.now() - t;
    let next = res[prompt.length - 1].next.token;
    t = performance.now();
    for (let i = 0; i < nGen; ++i) {
        res = await seq.controlledEvaluate([[next, { generateNext: { token: true, options: { temperature: 0 } } }]]);
        next = res[0].next.token;
    }
    const decodeMs = performance.now() - t;
    console.log(JSON.stringify({
        prompt_tokens: nPrompt, prompt_tok_s: 1000 * nPrompt / promptMs, gen_tokens: nGen,
        decode_tok_s: 1000 * nGen / decodeMs, threads, llama_cpp_commit: "80fb11a",
    }));
    await ctx.dispose();
    await model.dispose();
    process.exit(0);
} catch (e) {
    console.error(`llama_bench: ${e.message ?? e}`);
    process.exit(1);
}
