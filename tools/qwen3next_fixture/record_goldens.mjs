#!/usr/bin/env node
// Records llama.cpp goldens for the qwen3next test fixture with the live peer (tools/peer/llama_peer.mjs:
// node-llama-cpp 3.21.1, i.e. llama.cpp 80fb11a's prebuilt CPU libraries, 2 threads, context 4096,
// the prompt as one batch then one token per step, greedy, top-5 softmax probabilities of the raw
// logits at every step). Writes the fields of ../shared/fixtures/*.golden.json that the tests read
// (cases[].prompt_token_ids, generated_token_ids, top_probs[].top_logprobs[{id, logprob}],
// top_probs_steps, margins, near_tie_steps; chat.rendered_prompt_token_ids and
// chat.rendered_prompt_completion), plus the peer's settings and llama.cpp commit.
//
// usage: record_goldens.mjs MODEL.gguf TRANSFORMERS.json CHAT_GOLDEN.json OUT.json [N_PREDICT=32]
//   TRANSFORMERS.json: the prompts and their ids (../shared/tools/build_qwen3next_hf.py output);
//   CHAT_GOLDEN.json: a Qwen3 fixture golden whose chat.rendered_prompt_token_ids is reused (same
//   tokenizer and chat template).
import { spawnSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const [model, tfPath, chatPath, outPath, nArg] = process.argv.slice(2);
if (!outPath) {
    console.error("usage: record_goldens.mjs MODEL.gguf TRANSFORMERS.json CHAT_GOLDEN.json OUT.json [N_PREDICT]");
    process.exit(2);
}
const N = Number(nArg ?? 32);
const peer = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../peer/llama_peer.mjs");
const tf = JSON.parse(readFileSync(tfPath, "utf8"));
const chat = JSON.parse(readFileSync(chatPath, "utf8")).chat;
const cases = tf.prompts.map((p) => ({ name: p.name, prompt: p.text, prompt_token_ids: p.prompt_token_ids }));
const requests = [...cases.map((c) => c.prompt_token_ids), chat.rendered_prompt_token_ids].map((ids) => ({
    model, prompt_ids: ids, n_predict: N, n_probs: 5, threads: 2 }));
const r = spawnSync(process.execPath, [peer], { input: JSON.stringify(requests), encoding: "utf8", maxBuffer: 1 << 30 });
if (r.status !== 0) {
    console.error(r.stderr);
    process.exit(1);
}
const replies = JSON.parse(r.stdout);
function completion(rep) {
    const margins = rep.probs.map((t) => t[0].logprob - t[1].logprob);
    return {
        generated_token_ids: rep.ids,
        top_probs: rep.probs.map((t) => ({ id: t[0].id, logprob: t[0].logprob,
                                           top_logprobs: t.map((e) => ({ id: e.id, logprob: e.logprob })) })),
        top_probs_steps: rep.probs.map((_, i) => i),
        margins,
        near_tie_steps: margins.flatMap((m, i) => (m < 0.02 ? [i] : [])),
    };
}
const out = {
    model: path.basename(model),
    source: "llama.cpp 80fb11a (node-llama-cpp 3.21.1 prebuilt CPU libraries) through tools/peer/llama_peer.mjs",
    settings: replies[0].settings,
    llama_cpp: replies[0].llama_cpp,
    prompt_token_ids_note: "Hugging Face tokenizers' ids of the prompts (../shared/tools/build_qwen3next_hf.py); feed these ids",
    cases: cases.map((c, i) => ({ ...c, ...completion(replies[i]) })),
    chat: {
        note: "rendered_prompt_token_ids reused from " + path.basename(chatPath) + " (same Qwen3 tokenizer and chat template)",
        rendered_prompt_token_ids: chat.rendered_prompt_token_ids,
        rendered_prompt_completion: completion(replies[cases.length]),
    },
};
writeFileSync(outPath, JSON.stringify(out, null, 1) + "\n");
console.log(`wrote ${outPath}: ${out.cases.length} cases + chat, ${N} greedy steps each`);
