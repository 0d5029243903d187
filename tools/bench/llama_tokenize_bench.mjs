// llama.cpp's tokenizer on the same corpus as bench/bench_tokenizer (one thread, MB/s), through
// node-llama-cpp@3.21.1 (prebuilt llama.cpp, CPU). Run from a folder where node-llama-cpp is
// installed (npm install node-llama-cpp@3.21.1):
//   bench_tokenizer --write-corpus /tmp/corpus
//   node llama_tokenize_bench.mjs MODEL.gguf /tmp/corpus/english.txt [/tmp/corpus/code.txt ...]
// Prints one line per file: MiB/s by wall-clock and by process CPU time (best of 5 runs), token count. The time includes node-llama-cpp's
// conversion of the JS string to UTF-8 (a memcpy-speed step, small next to tokenization).
import {getLlama} from "node-llama-cpp";
import fs from "node:fs";

const [modelPath, ...files] = process.argv.slice(2);
const llama = await getLlama({gpu: false, build: "never"});
const model = await llama.loadModel({modelPath, vocabOnly: true});
for (const f of files) {
    const text = fs.readFileSync(f, "utf8");
    const bytes = Buffer.byteLength(text, "utf8");
    model.tokenize(text.slice(0, 100000));  // warm up
    let best = Infinity, best_cpu = Infinity, n = 0;
    for (let r = 0; r < 5; ++r) {
        const c0 = process.cpuUsage();
        const t0 = process.hrtime.bigint();
        const ids = model.tokenize(text);
        const dt = Number(process.hrtime.bigint() - t0) / 1e9;
        const c = process.cpuUsage(c0);
        best = Math.min(best, dt);
        best_cpu = Math.min(best_cpu, (c.user + c.system) / 1e6);
        n = ids.length;
    }
    // MiB/s, as Google Benchmark's bytes_per_second "M/s" (1 M = 2^20 bytes) reports it.
    console.log(JSON.stringify({file: f, bytes, tokens: n, wall_s: best, cpu_s: best_cpu,
                                MiB_per_s_wall: bytes / 1048576 / best, MiB_per_s_cpu: bytes / 1048576 / best_cpu}));
}
