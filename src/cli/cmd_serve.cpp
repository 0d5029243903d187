// nitro serve -m MODEL [--host 127.0.0.1] [--port 8080] [--api-key KEY] [-c CTX] [-t THREADS] [--parallel N] [--trace FILE]
// An OpenAI-compatible HTTP server (docs/server.md).
#include "arch/summary.h"
#include "cli/commands.h"
#include "cli/engine_options.h"
#include "cli/hf_option.h"
#include "cli/llama_compat.h"
#include "cli/load_progress.h"
#include "cli/memory_options.h"
#include "cli/serve_limits.h"
#include "cli/validators.h"
#include "core/error.h"
#include "runtime/generate.h"
#include "runtime/default_model.h"
#include "runtime/engine.h"
#include "runtime/model.h"
#include "server/http_guard.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/port_check.h"
#include "server/scheduler.h"
#include "tokenizer/bpe.h"
#include "tokenizer/chat.h"

#include <fmt/format.h>

#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <thread>

namespace nitro::cli {

namespace {

std::string join_names(const std::vector<std::string>& names) {
    std::string out;
    for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
    return out;
}

struct ServeOptions {
    std::string model;
    server::ServerOptions http;
    SessionOptions session;
    std::string trace_path;
    std::string route_replay;
    int parallel = 1;
    bool ctx_given = false;  ///< -c was given (else the default is capped to the model's context without a warning)
    bool api_key_given = false;  ///< --api-key (or NITRO_API_KEY) was given, maybe empty
    bool no_prefault = false;
    bool cont_batching = false;  ///< llama.cpp's -cb: accepted, always on
    EngineCli engine;
    LlamaCompat compat;
};

int serve(const ServeOptions& opts) {
    ServeOptions o = opts;
    if (!o.http.chat_date.empty()) {
        try {
            o.http.chat_date = chat_date_from_iso(o.http.chat_date);
        } catch (const Error& e) {
            fail("--chat-date: {}", e.what());
        }
    }
    // An empty key would mean no key: refuse it rather than serve without one by accident (a
    // `--api-key "$KEY"` whose variable is unset, an exported empty NITRO_API_KEY).
    if (o.api_key_given && o.http.api_key.empty())
        fail("--api-key is empty (an unset variable?): give a key, or leave --api-key out for a server without one");
    if (const char* env = std::getenv("NITRO_API_KEY"); env && !*env && o.http.api_key.empty())
        fail("NITRO_API_KEY is set but empty: give a key, or unset it for a server without one");
    if (o.model.empty()) o.model = default_model_path();  // the embedded model, as `nitro run`
    resolve_llama_compat(o.compat, &o.engine, o.session);
    // Cheap checks first, before any weight is read (a 60 GB model takes minutes): the port, then
    // the engine the mode needs; the GPU engine checks the VRAM budget against its plan before it
    // uploads anything.
    server::PortReservation port_check(o.http.host, o.http.port);
    check_mode_available(engine_mode(o.engine));
    // SIGINT/SIGTERM are taken by a dedicated thread (below); every other thread inherits the mask.
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
    signal(SIGPIPE, SIG_IGN);  // a client that went away must not kill the server on write

    std::fprintf(stderr, "nitro serve: opening %s\n", o.model.c_str());
    Model model(o.model);
    const Tokenizer tok = Tokenizer::from_gguf(model.gguf().metadata());
    std::optional<ChatFormat> format;
    try {
        format = chat_format_for(tok.vocab());
    } catch (const Error&) {
        std::fprintf(stderr, "warning: no known chat format in the vocabulary; /v1/chat/completions is disabled\n");
    }

    server::Metrics metrics;
    server::SchedulerOptions so;
    so.session = o.session;
    so.end_of_generation = end_of_generation_tokens(model, tok);
    so.trace_path = o.trace_path;
    so.route_replay = o.route_replay;
    so.mode = engine_mode(o.engine);
    so.gpu = o.engine.gpu;
    so.n_slots = o.parallel;
    server::Scheduler scheduler(model, so, metrics);
    if (o.ctx_given && o.session.n_ctx > scheduler.n_ctx())
        std::fprintf(stderr, "warning: -c %lld is above the model's training context; using %lld tokens\n",
                     static_cast<long long>(o.session.n_ctx), static_cast<long long>(scheduler.n_ctx()));

    if (!o.no_prefault) prefault_weights(model, isatty(STDERR_FILENO), true);

    server::ServerContext ctx;
    ctx.model = &model;
    ctx.tokenizer = &tok;
    ctx.chat_format = format;
    ctx.scheduler = &scheduler;
    ctx.metrics = &metrics;
    server::HttpServer http(ctx, o.http);
    port_check.release();
    const int port = http.bind();

    // Startup summary: what is served, where the weights are, what memory it takes.
    const ModelSummary sum = summarize_model(model.gguf());
    const ModelHparams& hp = model.hp();
    const uint64_t kv = scheduler.kv_bytes();
    std::fprintf(stderr,
                 "model      %s (%s, %lld layers, %lld experts, %lld used per token, vocab %lld, chat format %s)\n"
                 "weights    %s in %d file(s), memory-mapped; routed experts %s (%s per expert per layer)\n"
                 "placement  %s\n"
                 "memory     weights %s (page cache) + KV cache %s for %lld tokens x %d slot(s)\n"
                 "threads    %d compute, %d HTTP (up to %d under load); prompt chunk %lld tokens\n"
                 "slots      %d (--parallel): %s\n",
                 http.model_id().c_str(), model.gguf().metadata().get_string("general.architecture").value_or("?").c_str(),
                 static_cast<long long>(hp.n_layer), static_cast<long long>(hp.n_expert), static_cast<long long>(hp.n_expert_used),
                 static_cast<long long>(model.n_vocab()), format ? chat_format_name(*format) : "none",
                 format_bytes(sum.file_bytes).c_str(), sum.n_shards,
                 format_bytes(sum.bytes_by_category.count(TensorCategory::RoutedExpert) ? sum.bytes_by_category.at(TensorCategory::RoutedExpert) : 0).c_str(),
                 format_bytes(sum.bytes_per_expert).c_str(), scheduler.placement().c_str(), format_bytes(sum.file_bytes).c_str(), format_bytes(kv).c_str(),
                 static_cast<long long>(scheduler.n_ctx()), scheduler.n_slots(),
                 o.session.n_threads > 0 ? o.session.n_threads : static_cast<int>(std::thread::hardware_concurrency()),
                 o.http.http_threads, 4 * std::max(2, o.http.http_threads), static_cast<long long>(o.session.n_ubatch),
                 scheduler.n_slots(),
                 scheduler.n_slots() > 1 ? "requests decode together, one batched forward per token (continuous batching)"
                                         : "one request at a time");
    std::fprintf(stderr, "requests   body up to %g MiB, JSON nesting up to %d levels\n", o.http.max_body_mib, kMaxJsonDepth);
    std::fprintf(stderr, "%s", serve_limits_summary(http.options()).c_str());
    if (!o.trace_path.empty()) std::fprintf(stderr, "trace      routing of every request -> %s\n", o.trace_path.c_str());
    if (!o.route_replay.empty())
        std::fprintf(stderr, "WARNING    --route-replay %s: BENCHMARK ONLY. Every expert choice comes from the trace: the "
                             "answers are NOT the model's\n", o.route_replay.c_str());
    if (o.http.allow_scripted_output) std::fprintf(stderr, "WARNING    --debug-scripted-output: requests may dictate the output (test only)\n");
    if (!o.http.api_key.empty()) std::fprintf(stderr, "auth       API key required (Authorization: Bearer ...)\n");
    if (o.http.api_key.empty())
        std::fprintf(stderr, "auth       none; requests must be addressed to an IP address, localhost%s%s (Host check, "
                             "against DNS rebinding)\n",
                     o.http.allowed_hosts.empty() ? "" : " or ", join_names(o.http.allowed_hosts).c_str());
    if (o.http.api_key.empty() && !server::is_loopback_host(o.http.host))
        std::fprintf(stderr, "WARNING    --host %s without --api-key: anyone who can reach this port can use the server\n",
                     o.http.host.c_str());
    const std::string url = "http://" + server::url_authority(o.http.host, port);
    std::fprintf(stderr, "listening on %s (OpenAI base URL %s/v1)\n", url.c_str(), url.c_str());
    std::fflush(stderr);

    std::thread([&http, &scheduler, sigs] {
        int sig = 0;
        sigwait(&sigs, &sig);
        std::fprintf(stderr, "nitro serve: %s, stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
        // Jobs first: a running stream holds its HTTP thread, which the HTTP server joins.
        scheduler.stop();
        http.stop();
    }).detach();
    http.run();
    scheduler.stop();
    std::fprintf(stderr, "nitro serve: stopped\n");
    return 0;
}

}  // namespace

Action add_serve(CLI::App& app) {
    auto o = std::make_shared<ServeOptions>();
    auto hf = std::make_shared<std::string>();
    CLI::App* sub = app.add_subcommand("serve", "OpenAI-compatible HTTP server (chat/completions, completions, models, metrics)");
    sub->add_option("-m,--model", o->model, "GGUF model (first shard of a split model); default: the embedded models/tiny-moe-pystd.gguf")->envname("NITRO_MODEL");
    add_hf_option(sub, *hf);
    sub->add_option("--host", o->http.host, "Address to listen on")->capture_default_str()->envname("NITRO_HOST");
    sub->add_option("--port", o->http.port, "Port to listen on (0 = any free port, printed at startup)")
        ->check(CLI::Range(0, 65535))
        ->capture_default_str()->envname("NITRO_PORT");
    CLI::Option* key_opt =
        sub->add_option("--api-key", o->http.api_key,
                        "Require 'Authorization: Bearer KEY' (or x-api-key) on every route but /health. Without a key, any "
                        "local program can use the server, and requests must name an IP address, localhost or an "
                        "--allowed-host in their Host header (web pages cannot reach it through DNS rebinding)")
            ->envname("NITRO_API_KEY");
    sub->add_option("--allowed-host", o->http.allowed_hosts,
                    "Without --api-key: also accept requests whose Host header names this host (repeatable; '*' = any, "
                    "which lets web pages reach the server through DNS rebinding)")
        ->delimiter(',')
        ->envname("NITRO_ALLOWED_HOSTS");
    sub->add_option("--max-body-size", o->http.max_body_mib, "Largest request body accepted, MiB (larger ones get 413)")
        ->capture_default_str()
        ->envname("NITRO_MAX_BODY_SIZE");
    sub->add_option("--alias", o->http.model_id, "Model name clients use (default: the file name without .gguf; llama.cpp's -a)")
        ->check([](const std::string& s) -> std::string {
            if (s.empty()) return "the model name must not be empty";
            for (unsigned char c : s)
                if (c < 0x20 || c == 0x7f) return "the model name must not hold control characters";
            return "";
        });
    CLI::Option* ctx_opt = sub->add_option("-c,--ctx-size", o->session.n_ctx,
                                           "Context length, tokens (capped at the model's training context; a -c above it warns)")
                               ->capture_default_str()
                               ->envname("NITRO_CTX_SIZE");
    sub->add_option("-t,--threads", o->session.n_threads, "CPU threads (0 = all)")
        ->check(CLI::Range(0, 65536))
        ->capture_default_str()
        ->envname("NITRO_THREADS");
    sub->add_option("-u,--ubatch,--ubatch-size", o->session.n_ubatch,
                    "Prompt tokens per forward chunk (cancellation is checked between chunks; llama.cpp's -ub)")
        ->capture_default_str()
        ->check(integer_at_least(1));
    sub->add_option("--parallel", o->parallel,
                    "Requests served at once (slots; llama.cpp's -np), each with its own K/V cache of -c tokens; their decode steps run "
                    "as one batch (continuous batching), on the CPU and the GPU engines (the GPU ones keep the N K/V caches in VRAM)")
        ->capture_default_str()
        ->check(CLI::Range(1, 256))
        ->envname("NITRO_PARALLEL");
    sub->add_option("--http-threads", o->http.http_threads,
                    "HTTP threads kept ready (at least 2); when all are busy more start, up to 4x this many connections "
                    "at once (extra threads stop after 10 s idle)")
        ->check(CLI::Range(2, 4096))
        ->capture_default_str();
    add_serve_limit_flags(sub, o->http);
    sub->add_option("--reasoning-budget", o->http.reasoning_budget,
                    "Tokens of reasoning (gpt-oss analysis channel, Qwen3 <think>) a request with a JSON response_format "
                    "may take before its answer, unless it sends reasoning_budget_tokens: -1 = unlimited, 0 = none "
                    "(the answer comes first)")
        ->capture_default_str()
        ->check(CLI::Range(int64_t{-1}, int64_t{1} << 30))
        ->envname("NITRO_REASONING_BUDGET");
    sub->add_option("--chat-date", o->http.chat_date, "Date the gpt-oss template prints, YYYY-MM-DD (default: today; checked at startup)")
        ->envname("NITRO_CHAT_DATE");
    sub->add_option("--trace", o->trace_path, "Capture routing (expert ids and weights per token and layer) of every request to this trace file; seq = request number");
    sub->add_option("--route-replay", o->route_replay,
                    "BENCHMARK ONLY: take every expert choice from this router trace (docs/bench.md, nitro bench --routing "
                    "replay:TRACE); the answers are then not the model's");
    sub->add_flag("--debug-scripted-output", o->http.allow_scripted_output,
                  "TEST ONLY: accept the request field debug_scripted_output (text the server emits instead of sampling)");
    add_engine_options(sub, o->engine);
    add_llama_compat_options(sub, o->compat);
    sub->add_flag("--cont-batching", o->cont_batching,
                  "Accepted (llama.cpp's -cb); changes nothing: the --parallel slots always decode as one batch")
        ->group("llama.cpp flags (docs/cli.md)");
    sub->add_flag("--no-prefault", o->no_prefault, "Do not read the weights at startup (pages load on first use)");
    auto mem = std::make_shared<MemoryFlags>();
    add_memory_flags(sub, *mem);
    return [o, mem, ctx_opt, key_opt, hf]() {
        o->api_key_given = key_opt->count() > 0;
        o->ctx_given = ctx_opt->count() > 0;
        warn_threads_over_hardware(o->session.n_threads);
        apply_memory_flags(*mem);
        resolve_hf_model(*hf, o->model);
        return serve(*o);
    };
}

}  // namespace nitro::cli
