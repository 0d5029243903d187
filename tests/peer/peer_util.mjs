// Shared helpers of the peer tests (node --test): where the shared data and the tools are, and
// running the llama.cpp peer (tools/peer/llama_peer.mjs) on a batch of requests.
import { spawn, spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

export const sourceDir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
export const peerScript = path.join(sourceDir, "tools/peer/llama_peer.mjs");

/// ../shared beside the checkout, or NITRO_SHARED_DIR. Throws (the test fails) when it is missing.
export function sharedDir() {
    const d = process.env.NITRO_SHARED_DIR || path.resolve(sourceDir, "../shared");
    if (!existsSync(path.join(d, "fixtures"))) throw new Error(`shared data not found at '${d}' (set NITRO_SHARED_DIR)`);
    return d;
}

/// The nitro binary: NITRO_BINARY, else build/nitro in the checkout.
export function nitroBinary() {
    return process.env.NITRO_BINARY || path.join(sourceDir, "build/nitro");
}

/// Runs the peer on `requests` (an array) and returns its array of replies. Any failure of the
/// peer (not installed, model rejected) throws with the peer's stderr: the test fails, never skips.
/// Asynchronous, so that tests of different models can run the peer side by side.
export function runPeer(requests, { threads = 2 } = {}) {
    return new Promise((resolve, reject) => {
        const child = spawn(process.execPath, [peerScript], { stdio: ["pipe", "pipe", "pipe"] });
        const out = [], err = [];
        child.stdout.on("data", (d) => out.push(d));
        child.stderr.on("data", (d) => err.push(d));
        child.on("error", reject);
        child.on("close", (status) => {
            const stderr = Buffer.concat(err).toString("utf8");
            if (status !== 0) return reject(new Error(`llama_peer failed (status ${status}): ${stderr}`));
            try {
                resolve(JSON.parse(Buffer.concat(out).toString("utf8")));
            } catch (e) {
                reject(new Error(`llama_peer printed no valid JSON (${e.message}); stderr: ${stderr}`));
            }
        });
        child.stdin.end(JSON.stringify(requests.map((q) => ({ threads, ...q }))));
    });
}

/// Runs a command, returns {status, stdout, stderr}; throws only if it could not be started.
export function run(cmd, args, opts = {}) {
    const r = spawnSync(cmd, args, { encoding: "utf8", maxBuffer: 1 << 30, ...opts });
    if (r.error) throw r.error;
    return r;
}

/// top1 - top2 log-probability gap (nats) of one top-K list [{id, p, logprob}].
export function margin(top) {
    return top.length < 2 ? Infinity : top[0].logprob - top[1].logprob;
}

/// The kernel levels nitro can run on this CPU, lowest first (`nitro --version`: "kernels: ...
/// (this CPU can run: scalar avx2 avx512; ..."). The ISA matrix of the peer tests runs nitro at
/// each of them (NITRO_ISA) against one llama.cpp run.
export function nitroIsaLevels() {
    const r = run(nitroBinary(), ["--version"]);
    if (r.status !== 0) throw new Error(`nitro --version failed: ${r.stderr}`);
    const m = /this CPU can run: ([a-z0-9 ]+)/.exec(r.stdout);
    if (!m) throw new Error(`nitro --version printed no kernel levels: ${r.stdout}`);
    return m[1].trim().split(/ +/);
}
