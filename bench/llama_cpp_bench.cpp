// llama_cpp_bench: llama.cpp's CPU speed and greedy tokens on a GGUF, without node. It links the
// prebuilt libraries of node-llama-cpp 3.21.1 (llama.cpp 80fb11a; bench/llama_cpp_bench.cmake) and
// drives them exactly as tools/peer/llama_bench.mjs does through node-llama-cpp, so either can be
// the llama.cpp side of bench/cpu_vs_llamacpp.sh. docs/peer.md ("llama_cpp_bench").
//
//   llama_cpp_bench --model M.gguf [--threads 2] [--n-prompt 128] [--n-gen 32] [--ids]
//     Speed, as llama_bench.mjs: a pseudo-random prompt of N ids below 1000, evaluated as one batch
//     (timed: prompt_tok_s), then --n-gen greedy tokens one by one (timed: decode_tok_s). Prints
//     {"prompt_tokens","prompt_tok_s","gen_tokens","decode_tok_s","threads","llama_cpp_commit",
//      "peer","ggml_cpu_variant"} (+ "prompt_ids" and "ids", the n_gen + 1 greedy tokens, with --ids).
//   llama_cpp_bench --model M.gguf --prompt-ids 1,2,3 --n-gen 32 --ids [--threads 2]
//     Greedy tokens of a given prompt, with the settings of tools/peer/llama_peer.mjs (context 4096,
//     batch 512): the prompt as one batch, then one token per step; n_gen tokens in all.
//   llama_cpp_bench --model M.gguf --prompt-ids 1,2,3 --teacher-forced [--n-probs 5] [--threads 2]
//     Scores a sequence, as llama_peer.mjs's teacher_forced: the ids as one batch with logits at
//     every position; prints "teacher_forced":{"ids":[...],"probs":[[{"id","p","logprob"}...]...]},
//     probs[i] the top-K next tokens after ids[0..i] (softmax of the raw logits over the whole
//     vocabulary). With --backend-dir naming a folder that holds one libggml-cpu-<variant>.so, this
//     is llama.cpp's answer for that CPU level (docs/peer.md, "The peer's own spread across ISAs").
//
// Settings, as node-llama-cpp 3.21.1 passes them to llama.cpp for llama_bench.mjs / llama_peer.mjs
// (read from its addon source and traced at run time): context = --ctx (default: n_prompt + n_gen
// + 16 for speed, 4096 for --prompt-ids) rounded up to a multiple of 256; n_batch = n_ubatch =
// --batch (default max(512, n_prompt) for speed, 512 for --prompt-ids), + 1 when the model has a
// sliding window (node-llama-cpp's SWA margin); one sequence; flash attention auto; F16 K/V cache;
// SWA cache not full size; the same thread count for batch and single-token evaluation; model
// memory-mapped, not locked, tensors not checked. Greedy is llama.cpp's greedy sampler over the
// full vocabulary's logits (node-llama-cpp builds the same chain at temperature 0). No warm-up
// run, like llama_bench.mjs: the timed prompt is the first evaluation.
//
// The CPU backend is loaded with ggml_backend_load_all_from_path(dir of libggml), so ggml picks the
// best libggml-cpu-<variant>.so for this CPU, as node-llama-cpp does; --backend-dir DIR overrides.
// Any failure prints "llama_cpp_bench: error: ..." and exits with status 1.
#include <dlfcn.h>
#include <link.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "ggml-backend.h"
#include "llama.h"

#ifndef LLAMA_CPP_COMMIT
#define LLAMA_CPP_COMMIT "unknown"
#endif

namespace {

struct Options {
    std::string model, backend_dir;
    int threads = 2, n_prompt = 128, n_gen = 32, ctx = -1, batch = -1;
    bool have_prompt_ids = false, print_ids = false, verbose = false, teacher_forced = false;
    int n_probs = 5;
    std::vector<llama_token> prompt_ids;
};

[[noreturn]] void fail(const std::string& msg) { throw std::runtime_error(msg); }

long parse_int(const std::string& flag, const std::string& s, long lo, long hi) {
    long v = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || p != s.data() + s.size() || v < lo || v > hi)
        fail(flag + ": '" + s + "' is not an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return v;
}

std::vector<llama_token> parse_ids(const std::string& s) {
    std::vector<llama_token> ids;
    size_t i = 0;
    while (i <= s.size()) {
        size_t j = s.find(',', i);
        if (j == std::string::npos) j = s.size();
        ids.push_back(static_cast<llama_token>(parse_int("--prompt-ids", s.substr(i, j - i), 0, INT32_MAX)));
        i = j + 1;
    }
    return ids;
}

const char* kUsage =
    "usage: llama_cpp_bench --model M.gguf [--threads 2] [--n-prompt 128] [--n-gen 32] [--ids]\n"
    "       llama_cpp_bench --model M.gguf --prompt-ids 1,2,3 [--n-gen 32] --ids [--threads 2]\n"
    "       llama_cpp_bench --model M.gguf --prompt-ids 1,2,3 --teacher-forced [--n-probs 5]\n"
    "options: --ctx N (default n_prompt+n_gen+16, or 4096 with --prompt-ids), --batch N (default\n"
    "         max(512, n_prompt), or 512 with --prompt-ids), --backend-dir DIR (default: the folder of\n"
    "         libggml), --verbose (llama.cpp's log). Prints one JSON object; see docs/peer.md.\n";

Options parse_args(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "-h" || a == "--help") { std::fputs(kUsage, stdout); std::exit(0); }
        if (a == "--ids") { o.print_ids = true; continue; }
        if (a == "--verbose") { o.verbose = true; continue; }
        if (a == "--teacher-forced") { o.teacher_forced = true; continue; }
        if (i + 1 >= argc) fail(a + " needs a value (see --help)");
        const std::string v = argv[++i];
        if (a == "--model" || a == "-m") o.model = v;
        else if (a == "--threads" || a == "-t") o.threads = static_cast<int>(parse_int(a, v, 0, 4096));
        else if (a == "--n-prompt") o.n_prompt = static_cast<int>(parse_int(a, v, 1, 1 << 20));
        else if (a == "--n-gen" || a == "-n") o.n_gen = static_cast<int>(parse_int(a, v, 0, 1 << 20));
        else if (a == "--ctx") o.ctx = static_cast<int>(parse_int(a, v, 1, 1 << 24));
        else if (a == "--batch") o.batch = static_cast<int>(parse_int(a, v, 1, 1 << 20));
        else if (a == "--prompt-ids") { o.prompt_ids = parse_ids(v); o.have_prompt_ids = true; }
        else if (a == "--backend-dir") o.backend_dir = v;
        else if (a == "--n-probs") o.n_probs = static_cast<int>(parse_int(a, v, 1, 1000));
        else fail("unknown argument '" + a + "' (see --help)");
    }
    if (o.model.empty()) fail("--model is required");
    if (o.teacher_forced && !o.have_prompt_ids) fail("--teacher-forced needs --prompt-ids");
    return o;
}

/// llama_bench.mjs's prompt: x = (x * 1103515245 + 12345) % 2^31 in float64 (JavaScript numbers,
/// so the product is rounded), token = x % 1000. Compiled with -ffp-contract=off: no FMA here.
std::vector<llama_token> bench_prompt(int n) {
    std::vector<llama_token> p(n);
    double x = 1;
    for (int i = 0; i < n; ++i) {
        const double prod = x * 1103515245.0;
        x = std::fmod(prod + 12345.0, 2147483648.0);
        p[i] = static_cast<llama_token>(std::fmod(x, 1000.0));
    }
    return p;
}

bool g_verbose = false;
void log_cb(ggml_log_level level, const char* text, void*) {
    // node-llama-cpp's peer runs at log level "error"; --verbose shows everything.
    if (g_verbose || level == GGML_LOG_LEVEL_ERROR) std::fputs(text, stderr);
}

std::string dir_of_symbol(const void* sym) {
    Dl_info info{};
    if (!dladdr(sym, &info) || !info.dli_fname) return ".";
    std::string p = info.dli_fname;
    if (char* r = realpath(p.c_str(), nullptr)) { p = r; std::free(r); }
    const size_t s = p.find_last_of('/');
    return s == std::string::npos ? "." : p.substr(0, s);
}

/// The libggml-cpu-<variant>.so that ggml's registry loaded ("" if none).
std::string loaded_cpu_variant() {
    std::string found;
    dl_iterate_phdr([](dl_phdr_info* info, size_t, void* data) {
        const char* name = info->dlpi_name ? info->dlpi_name : "";
        const char* base = std::strrchr(name, '/');
        base = base ? base + 1 : name;
        if (std::strncmp(base, "libggml-cpu-", 12) == 0) *static_cast<std::string*>(data) = base;
        return 0;
    }, &found);
    return found;
}

std::string json_num(double v) {
    if (!std::isfinite(v)) return "null";
    char buf[64];
    auto r = std::to_chars(buf, buf + sizeof buf, v);   // shortest round trip, like JSON.stringify
    return std::string(buf, r.ptr);
}

std::string json_ids(const std::vector<llama_token>& ids) {
    std::string s = "[";
    for (size_t i = 0; i < ids.size(); ++i) {
        if (i) s += ',';
        s += std::to_string(ids[i]);
    }
    return s + "]";
}

double ms_since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

int run(const Options& o) {
    g_verbose = o.verbose;
    llama_log_set(log_cb, nullptr);
    llama_backend_init();
    const std::string backend_dir = o.backend_dir.empty()
        ? dir_of_symbol(reinterpret_cast<const void*>(&ggml_backend_load_all_from_path)) : o.backend_dir;
    ggml_backend_load_all_from_path(backend_dir.c_str());
    const std::string cpu_lib = loaded_cpu_variant();
    if (ggml_backend_dev_count() == 0 || cpu_lib.empty())
        fail("no ggml CPU backend (libggml-cpu-*.so) could be loaded from '" + backend_dir + "'");
    std::string variant = cpu_lib.substr(12);
    variant = variant.substr(0, variant.size() - 3);   // strip ".so"
    std::fprintf(stderr, "llama_cpp_bench: llama.cpp %.7s, ggml CPU backend %s/%s\n", LLAMA_CPP_COMMIT,
                 backend_dir.c_str(), cpu_lib.c_str());

    const bool ids_mode = o.have_prompt_ids;
    std::vector<llama_token> prompt = ids_mode ? o.prompt_ids : bench_prompt(o.n_prompt);
    const int n_prompt = static_cast<int>(prompt.size());
    if (n_prompt == 0) fail("empty prompt");
    // --prompt-ids: n_gen tokens (the first comes from the prompt); speed: the prompt's token, then
    // n_gen timed decode steps.
    const int n_decode = ids_mode ? std::max(0, o.n_gen - 1) : o.n_gen;

    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    mp.load_mode = LLAMA_LOAD_MODE_MMAP;
    mp.lazy_mode = LLAMA_LAZY_MODE_OFF;
    mp.check_tensors = false;
    mp.vocab_only = false;
    llama_model* model = llama_model_load_from_file(o.model.c_str(), mp);
    if (!model) fail("llama.cpp could not load '" + o.model + "'");
    const llama_vocab* vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);
    for (llama_token t : prompt)
        if (t < 0 || t >= n_vocab)
            fail("token id " + std::to_string(t) + " is outside the vocabulary of '" + o.model + "' (" +
                 std::to_string(n_vocab) + " tokens)");

    const int ctx_req = o.ctx > 0 ? o.ctx : (ids_mode ? 4096 : n_prompt + o.n_gen + 16);
    const int batch_req = o.batch > 0 ? o.batch : (ids_mode ? 512 : std::max(512, n_prompt));
    if (n_prompt > batch_req) fail("prompt longer than the batch (" + std::to_string(batch_req) + "): it would not be one batch");
    if (n_prompt + n_decode + 1 > ctx_req) fail("prompt + generated tokens exceed the context (" + std::to_string(ctx_req) + ")");
    const int threads = o.threads > 0 ? o.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));

    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = static_cast<uint32_t>((ctx_req + 255) / 256 * 256);              // padSafeContextSize "up"
    cp.n_batch = static_cast<uint32_t>(batch_req + (llama_model_n_swa(model) > 0 ? 1 : 0));
    cp.n_ubatch = cp.n_batch;
    cp.n_seq_max = 1;
    cp.n_threads = threads;
    cp.n_threads_batch = threads;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_AUTO;
    cp.type_k = GGML_TYPE_F16;
    cp.type_v = GGML_TYPE_F16;
    cp.swa_full = false;
    cp.embeddings = false;
    cp.no_perf = true;
    llama_context* ctx = llama_init_from_model(model, cp);
    if (!ctx) fail("llama.cpp could not create a context");

    // Greedy as node-llama-cpp samples at temperature 0: a chain of llama.cpp's greedy sampler,
    // applied to the logits of the whole vocabulary.
    llama_sampler* chain = llama_sampler_chain_init(llama_sampler_chain_default_params());
    llama_sampler_chain_add(chain, llama_sampler_init_greedy());
    std::vector<llama_token_data> cand(n_vocab);
    auto sample = [&](int32_t i) {
        const float* logits = llama_get_logits_ith(ctx, i);
        if (!logits) fail("no logits");
        for (llama_token t = 0; t < n_vocab; ++t) cand[t] = llama_token_data{t, logits[t], 0.0f};
        llama_token_data_array arr{cand.data(), cand.size(), -1, false};
        llama_sampler_apply(chain, &arr);
        if (arr.selected < 0 || arr.selected >= static_cast<int64_t>(arr.size)) fail("the greedy sampler chose nothing");
        return arr.data[arr.selected].id;
    };
    llama_batch batch = llama_batch_init(static_cast<int32_t>(cp.n_batch), 0, 1);
    auto release = [&] {
        llama_batch_free(batch);
        llama_sampler_free(chain);
        llama_free(ctx);
        llama_model_free(model);
        llama_backend_free();
    };
    int pos = 0;
    auto decode = [&](const llama_token* toks, int n) {
        batch.n_tokens = n;
        for (int k = 0; k < n; ++k) {
            batch.token[k] = toks[k];
            batch.pos[k] = pos + k;
            batch.n_seq_id[k] = 1;
            batch.seq_id[k][0] = 0;
            batch.logits[k] = k == n - 1;   // only the last position's logits, as llama_bench.mjs asks
        }
        const int r = llama_decode(ctx, batch);
        if (r != 0) fail("llama_decode failed (" + std::to_string(r) + ")");
        llama_synchronize(ctx);
        pos += n;
        return sample(n - 1);
    };

    if (o.teacher_forced) {
        batch.n_tokens = n_prompt;
        for (int k = 0; k < n_prompt; ++k) {
            batch.token[k] = prompt[k];
            batch.pos[k] = k;
            batch.n_seq_id[k] = 1;
            batch.seq_id[k][0] = 0;
            batch.logits[k] = 1;
        }
        const int r = llama_decode(ctx, batch);
        if (r != 0) fail("llama_decode failed (" + std::to_string(r) + ")");
        llama_synchronize(ctx);
        std::string probs = "[";
        std::vector<std::pair<float, llama_token>> order(n_vocab);
        for (int i = 0; i < n_prompt; ++i) {
            const float* lg = llama_get_logits_ith(ctx, i);
            if (!lg) fail("no logits at position " + std::to_string(i));
            float mx = -INFINITY;
            for (int v = 0; v < n_vocab; ++v) mx = std::max(mx, lg[v]);
            double sum = 0;
            for (int v = 0; v < n_vocab; ++v) sum += std::exp(static_cast<double>(lg[v]) - mx);
            for (int v = 0; v < n_vocab; ++v) order[v] = {lg[v], v};
            const int k = std::min(o.n_probs, n_vocab);
            std::partial_sort(order.begin(), order.begin() + k, order.end(),
                              [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
            probs += i ? ",[" : "[";
            for (int j = 0; j < k; ++j) {
                const double lp = static_cast<double>(order[j].first) - mx - std::log(sum);
                probs += (j ? ",{\"id\":" : "{\"id\":") + std::to_string(order[j].second) + ",\"p\":" + json_num(std::exp(lp)) +
                         ",\"logprob\":" + json_num(lp) + "}";
            }
            probs += "]";
        }
        probs += "]";
        std::string js = "{\"peer\":\"llama_cpp_bench\",\"llama_cpp_commit\":\"" + std::string(LLAMA_CPP_COMMIT).substr(0, 7) +
                         "\",\"ggml_cpu_variant\":\"" + variant + "\",\"threads\":" + std::to_string(threads) +
                         ",\"teacher_forced\":{\"ids\":" + json_ids(prompt) + ",\"probs\":" + probs + "}}\n";
        std::fputs(js.c_str(), stdout);
        std::fflush(stdout);
        release();
        return 0;
    }

    std::vector<llama_token> out;
    auto t = std::chrono::steady_clock::now();
    llama_token next = decode(prompt.data(), n_prompt);
    const double prompt_ms = ms_since(t);
    if (o.n_gen > 0 || !ids_mode) out.push_back(next);
    t = std::chrono::steady_clock::now();
    for (int i = 0; i < n_decode; ++i) {
        next = decode(&next, 1);
        out.push_back(next);
    }
    const double decode_ms = ms_since(t);

    std::string js = "{\"prompt_tokens\":" + std::to_string(n_prompt) +
        ",\"prompt_tok_s\":" + json_num(1000.0 * n_prompt / prompt_ms) +
        ",\"gen_tokens\":" + std::to_string(n_decode) +
        ",\"decode_tok_s\":" + json_num(n_decode > 0 ? 1000.0 * n_decode / decode_ms : NAN) +
        ",\"threads\":" + std::to_string(o.threads) + ",\"llama_cpp_commit\":\"" + std::string(LLAMA_CPP_COMMIT).substr(0, 7) +
        "\",\"peer\":\"llama_cpp_bench\",\"ggml_cpu_variant\":\"" + variant + "\"" +
        ",\"n_ctx\":" + std::to_string(llama_n_ctx(ctx)) + ",\"n_batch\":" + std::to_string(llama_n_batch(ctx));
    if (o.print_ids) js += ",\"prompt_ids\":" + json_ids(prompt) + ",\"ids\":" + json_ids(out);
    js += "}\n";
    std::fputs(js.c_str(), stdout);
    std::fflush(stdout);

    release();
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        return run(parse_args(argc, argv));
    } catch (const std::exception& e) {
        std::fprintf(stderr, "llama_cpp_bench: error: %s\n", e.what());
        return 1;
    }
}
