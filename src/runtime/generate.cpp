#include "runtime/generate.h"

#include "core/error.h"
#include "core/text.h"
#include "core/user_file.h"
#include "runtime/default_model.h"
#include "runtime/route_replay.h"
#include "runtime/route_trace.h"
#include "tokenizer/bpe.h"
#include "tokenizer/chat.h"
#include "tokenizer/detokenize.h"
#include "trace/model_header.h"
#include "trace/trace_file.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>

namespace nitro {

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

nlohmann::json probs_json(const std::vector<TokenProb>& v) {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& t : v) a.push_back({{"id", t.id}, {"p", t.p}});
    return a;
}

}  // namespace

std::vector<int32_t> end_of_generation_tokens(const Model& model, const Tokenizer& tok) {
    std::vector<int32_t> eog;
    if (auto eos = model.gguf().metadata().get_int("tokenizer.ggml.eos_token_id"); eos && *eos >= 0) eog.push_back(static_cast<int32_t>(*eos));
    if (auto eot = model.gguf().metadata().get_int("tokenizer.ggml.eot_token_id"); eot && *eot >= 0) eog.push_back(static_cast<int32_t>(*eot));
    // As llama.cpp's vocabulary loader: the chat formats' end-of-turn markers end generation.
    // (<|end|> does not: in harmony it closes a message and generation continues.)
    for (const char* t : {"<|return|>", "<|call|>", "<|im_end|>", "<|endoftext|>", "<|eot_id|>"}) {
        const int32_t id = tok.vocab().find_text(t);
        if (id >= 0 && tok.vocab().is_control(id) && std::find(eog.begin(), eog.end(), id) == eog.end()) eog.push_back(id);
    }
    return eog;
}

GenerateResult generate(const GenerateOptions& opt, const std::function<void(const std::string&)>& on_text) {
    Model model(opt.model.empty() ? default_model_path() : opt.model);
    GenerateResult r;
    int n_sources = !opt.prompt.empty() + !opt.prompt_file.empty() + !opt.prompt_ids.empty();
    if (n_sources > 1) fail("give the prompt one way only: -p, -f or --prompt-ids");
    const Tokenizer tok = Tokenizer::from_gguf(model.gguf().metadata());
    if (!opt.prompt_ids.empty()) {
        if (opt.chat) fail("--chat needs a text prompt (-p or -f), not --prompt-ids");
        r.prompt_ids = opt.prompt_ids;
    } else {
        std::string text = opt.prompt;
        if (!opt.prompt_file.empty()) {
            text = read_user_file(opt.prompt_file, "prompt file");
        }
        if (opt.chat) {
            // Only the template's markup becomes control tokens; the prompt text is plain text.
            nlohmann::ordered_json messages = nlohmann::ordered_json::array();
            if (!opt.system_prompt.empty()) messages.push_back({{"role", "system"}, {"content", opt.system_prompt}});
            messages.push_back({{"role", "user"}, {"content", text}});
            r.prompt_ids = encode_chat(tok, render_chat_marked(chat_format_for(tok.vocab()), messages, nullptr, ChatOptions{}));
        } else {
            EncodeOptions enc;
            enc.parse_special = true;  // as llama.cpp's CLI: template text in a raw prompt is markup
            enc.add_special = true;
            r.prompt_ids = tok.encode(text, enc);
        }
    }
    if (r.prompt_ids.empty()) fail("the prompt is empty");
    if (opt.n_predict < -2) fail("-n must be at least -2 (got {}; -1 and -2: until end of generation or the context is full)", opt.n_predict);
    if (!opt.system_prompt.empty() && !opt.chat) fail("--system-prompt needs --chat (or a conversation: -cnv, nitro chat)");

    std::unique_ptr<Engine> engine = make_engine(opt.mode, model, opt.session, opt.gpu);
    Engine& session = *engine;
    if (opt.ctx_given && opt.session.n_ctx > session.n_ctx())
        std::fprintf(stderr, "warning: -c %lld is above the model's training context; using %lld tokens\n",
                     static_cast<long long>(opt.session.n_ctx), static_cast<long long>(session.n_ctx()));
    if (!opt.route_replay.empty()) {
        if (!session.set_route_replay(std::make_shared<RouteReplay>(resolve_replay_trace(opt.route_replay), model)))
            fail("--route-replay: this engine ({}) cannot replay routing", session.describe());
        std::fprintf(stderr, "WARNING: --route-replay %s: BENCHMARK ONLY. Every expert choice comes from the trace: the "
                             "output below is NOT the model's.\n", opt.route_replay.c_str());
    }
    std::unique_ptr<TraceWriter> trace;
    std::function<void(const RouteEvent&)> write_route;
    if (!opt.trace_path.empty()) {
        trace = std::make_unique<TraceWriter>(opt.trace_path, trace_header_from_model(model.gguf(), true));
        write_route = route_record_writer(*trace, [](const RouteEvent&) { return uint32_t{0}; });
    }
    // Per position: the smallest router margin over the layers (reported with the probabilities).
    std::vector<float> margin_at;
    const bool margins = opt.n_probs > 0;
    if (write_route || margins) {
        const bool ok = session.set_route_callback([&write_route, &margin_at, margins](const RouteEvent& e) {
            if (write_route) write_route(e);
            if (!margins) return;
            const auto p = static_cast<size_t>(e.pos);
            if (margin_at.size() <= p) margin_at.resize(p + 1, INFINITY);
            margin_at[p] = std::min(margin_at[p], e.margin);
        });
        if (!ok && trace) fail("--trace: routing capture is not available with this engine ({})", session.describe());
    }
    auto margin_of = [&margin_at](int64_t pos) {
        return static_cast<size_t>(pos) < margin_at.size() ? margin_at[static_cast<size_t>(pos)] : INFINITY;
    };
    if (opt.on_engine_ready) opt.on_engine_ready(model);
    // -n -1 / -2 (llama.cpp): as many tokens as the context holds after the prompt
    const int64_t n_predict =
        opt.n_predict >= 0 ? opt.n_predict : std::max<int64_t>(0, session.n_ctx() - static_cast<int64_t>(r.prompt_ids.size()));
    if (static_cast<int64_t>(r.prompt_ids.size()) + n_predict > session.n_ctx()) {
        // -c is capped at the model's training context: past it, only the prompt or -n can give
        const int64_t n_train = model.hp().n_ctx_train;
        const std::string fix = n_train > 0 && session.n_ctx() >= n_train
                                    ? "the model's training context, the most -c gives): shorten the prompt or lower -n"
                                    : n_train > 0 ? fmt::format("-c; the model's training context is {}): raise -c, shorten "
                                                                "the prompt or lower -n", n_train)
                                                  : std::string("-c): raise -c, shorten the prompt or lower -n");
        fail("the prompt ({}) plus {} generated tokens do not fit the context of {} tokens ({}",
             count_noun(static_cast<long long>(r.prompt_ids.size()), "token"), n_predict, session.n_ctx(), fix);
    }
    const std::vector<int32_t> eog = end_of_generation_tokens(model, tok);
    StreamingDetokenizer detok(tok);
    Sampler sampler(opt.sampling);
    const int64_t V = model.n_vocab();
    std::vector<float> logits;

    const auto t0 = Clock::now();
    const bool all = opt.echo && opt.n_probs > 0;
    session.eval(r.prompt_ids, all, logits);
    r.timings.prompt_ms = ms_since(t0);
    r.timings.n_prompt = static_cast<int64_t>(r.prompt_ids.size());
    if (all)
        for (size_t i = 0; i < r.prompt_ids.size(); ++i) {
            r.prompt_probs.push_back(top_probs(std::span<const float>(logits.data() + i * V, static_cast<size_t>(V)), opt.n_probs));
            if (!margin_at.empty()) r.prompt_router_margins.push_back(margin_of(static_cast<int64_t>(i)));
        }
    std::span<const float> last(logits.data() + (all ? (r.prompt_ids.size() - 1) * V : 0), static_cast<size_t>(V));

    r.stop_reason = "length";
    const auto t1 = Clock::now();
    for (int64_t step = 0; step < n_predict; ++step) {
        if (opt.n_probs > 0) {
            r.probs.push_back(top_probs(last, opt.n_probs));
            if (!margin_at.empty()) r.router_margins.push_back(margin_of(static_cast<int64_t>(r.prompt_ids.size()) - 1 + step));
        }
        const int32_t next = sampler.sample(last);
        if (step == 0) r.timings.ttft_ms = ms_since(t0);
        r.ids.push_back(next);
        if (!opt.ignore_eos && std::find(eog.begin(), eog.end(), next) != eog.end()) {
            r.stop_reason = "eos";
            break;
        }
        const std::string piece = detok.push(next);
        r.text += piece;
        if (on_text && !piece.empty()) on_text(piece);
        if (step + 1 == n_predict) break;
        const int32_t one[1] = {next};
        session.eval(one, false, logits);
        last = std::span<const float>(logits.data(), static_cast<size_t>(V));
    }
    r.timings.decode_ms = ms_since(t1);
    r.timings.n_decode = static_cast<int64_t>(r.ids.size()) > 0 ? static_cast<int64_t>(r.ids.size()) - 1 : 0;
    if (trace) trace->close();
    const std::string tail = detok.flush();
    r.text += tail;
    if (on_text && !tail.empty()) on_text(tail);
    r.engine = engine->describe();
    if (const ExpertCounters* c = engine->expert_counters()) {
        r.experts = *c;
        if (trace) {  // the trace's companion: where the traced routing was computed
            const std::string side = opt.trace_path + ".counters.json";
            std::ofstream out(side);
            out << nlohmann::json{{"engine", r.engine}, {"experts", expert_counters_json(*c)}}.dump(1) << "\n";
            if (!out) fail("cannot write '{}'", side);
            // ... and the expert cache's setup, so `nitro sim TRACE --engine` replays what ran.
            if (const ExpertCache* cache = engine->expert_cache()) {
                const std::string res = opt.trace_path + ".residency.json";
                std::ofstream rs(res);
                rs << setup_to_json(cache->setup()).dump() << "\n";
                if (!rs) fail("cannot write '{}'", res);
            }
        }
    }
    return r;
}

namespace {

nlohmann::json layer_json(const ExpertLayerCounters& L) {
    const uint64_t pairs = L.gpu_pairs + L.cpu_pairs;
    const CacheCounters& c = L.cache;
    return {{"gpu_pairs", L.gpu_pairs}, {"cpu_pairs", L.cpu_pairs}, {"cpu_experts", L.cpu_experts},
            {"cpu_bytes", L.cpu_bytes}, {"cpu_ms", L.cpu_ms}, {"cpu_decode_ms", L.cpu_decode_ms}, {"gpu_ms", L.gpu_ms}, {"wait_ms", L.wait_ms},
            {"gpu_share", pairs ? static_cast<double>(L.gpu_pairs) / static_cast<double>(pairs) : 0.0},
            {"cpu_gb_s", L.cpu_ms > 0 ? static_cast<double>(L.cpu_bytes) / (L.cpu_ms * 1e6) : 0.0},
            {"prompt", {{"resident_experts", L.prompt_resident_experts}, {"cpu_experts", L.prompt_cpu_experts},
                        {"staged_experts", L.staged_experts}, {"staged_in_place", L.staged_in_place},
                        {"staged_pairs", L.staged_pairs}, {"staged_bytes", L.staged_bytes},
                        {"stage_ms", L.stage_ms}, {"cpu_ms", L.prompt_cpu_ms}, {"gpu_idle_ms", L.prompt_idle_ms},
                        {"staged_gb_s", L.stage_ms > 0 ? static_cast<double>(L.staged_bytes) / (L.stage_ms * 1e6) : 0.0}}},
            {"cache", cache_counters_json(c)}};
}

}  // namespace

nlohmann::json cache_counters_json(const CacheCounters& c) {
    return {{"hits", c.hits}, {"misses", c.misses}, {"hit_rate", c.hit_rate()}, {"admissions", c.admissions},
            {"evictions", c.evictions}, {"refused_rate", c.refused_rate}, {"refused_staging", c.refused_staging},
            {"refused_policy", c.refused_policy}, {"late_copies", c.late_copies}, {"failed_copies", c.failed_copies},
            {"flips", c.flips}, {"h2d_bytes", c.h2d_bytes}};
}

nlohmann::json expert_counters_json(const ExpertCounters& c) {
    nlohmann::json layers = nlohmann::json::array();
    for (const auto& L : c.layers) layers.push_back(layer_json(L));
    nlohmann::json j = layer_json(c.total());
    j["decode_steps"] = c.decode_steps;
    j["prefill_tokens"] = c.prefill_tokens;
    j["prompt_groups"] = c.prompt_groups;
    j["prompt_group_tokens"] = c.prompt_group_tokens;
    j["layers"] = layers;
    return j;
}

std::string expert_counters_line(const ExpertCounters& c) {
    const ExpertLayerCounters t = c.total();
    const uint64_t pairs = t.gpu_pairs + t.cpu_pairs + t.staged_pairs;
    if (pairs == 0) return "";
    std::string s = fmt::format("experts: {:.1f}% of {} selections on the GPU, {:.1f}% on the CPU", 100.0 * t.gpu_pairs / pairs,
                                pairs, 100.0 * t.cpu_pairs / pairs);
    if (t.staged_pairs > 0) s += fmt::format(", {:.1f}% staged to the GPU", 100.0 * t.staged_pairs / pairs);
    if (t.cpu_pairs > 0)
        s += fmt::format(" ({:.2f} GB read in {:.0f} ms: {:.1f} GB/s)", t.cpu_bytes / 1e9, t.cpu_ms,
                         t.cpu_ms > 0 ? t.cpu_bytes / (t.cpu_ms * 1e6) : 0.0);
    if (c.decode_steps > 0 && (t.gpu_ms > 0 || t.wait_ms > 0))
        s += fmt::format("; per decode step: CPU experts {:.2f} ms, GPU experts {:.2f} ms, GPU waiting for the CPU {:.2f} ms",
                         t.cpu_decode_ms / static_cast<double>(c.decode_steps),
                         t.gpu_ms / static_cast<double>(c.decode_steps), t.wait_ms / static_cast<double>(c.decode_steps));
    if (c.prefill_tokens > 0 && (t.staged_experts > 0 || t.prompt_cpu_experts > 0))
        s += fmt::format("\nprompt experts: {} resident, {} staged ({:.2f} GB host-to-device in {:.0f} ms: {:.1f} GB/s), {} on the CPU "
                         "({:.0f} ms); GPU idle {:.0f} ms (waiting for copies and for the CPU)",
                         t.prompt_resident_experts, t.staged_experts, t.staged_bytes / 1e9, t.stage_ms,
                         t.stage_ms > 0 ? t.staged_bytes / (t.stage_ms * 1e6) : 0.0, t.prompt_cpu_experts, t.prompt_cpu_ms,
                         t.prompt_idle_ms);
    if (t.staged_in_place > 0) s += fmt::format("; {} of the staged experts copied straight from pinned file pages", t.staged_in_place);
    if (c.prompt_groups > 0)
        s += fmt::format("; {} of {} prompt tokens in {} layer-major group{}", c.prompt_group_tokens, c.prefill_tokens,
                         c.prompt_groups, c.prompt_groups == 1 ? "" : "s");
    const CacheCounters& k = t.cache;
    if (k.hits + k.misses > 0) {
        const double tokens = static_cast<double>(c.decode_steps + c.prefill_tokens);
        s += fmt::format("\nexpert cache: hit rate {:.1f}% ({} of {} selections of the layers with experts on the CPU), "
                         "{} admissions ({:.1f} MB host-to-device{}), {} evictions, refused: {} rate, {} staging, {} policy; "
                         "{} late and {} failed copies",
                         100.0 * k.hit_rate(), k.hits, k.hits + k.misses, k.admissions, k.h2d_bytes / 1e6,
                         tokens > 0 ? fmt::format(", {:.2f} MB/token", k.h2d_bytes / 1e6 / tokens) : std::string(),
                         k.evictions, k.refused_rate, k.refused_staging, k.refused_policy, k.late_copies, k.failed_copies);
    }
    return s;
}

std::string expert_counters_table(const ExpertCounters& c) {
    std::string s = "layer   GPU sel   CPU sel  CPU experts   CPU MB   CPU ms   GPU ms  wait ms   hit %  admit  evict  refused"
                    "  staged  stage MB  stage ms  idle ms\n";
    for (size_t il = 0; il < c.layers.size(); ++il) {
        const auto& L = c.layers[il];
        const CacheCounters& k = L.cache;
        s += fmt::format("{:5} {:9} {:9} {:12} {:8.1f} {:8.2f} {:8.2f} {:8.2f} {:7.1f} {:6} {:6} {:8} {:7} {:9.1f} {:9.2f} {:8.2f}\n",
                         il, L.gpu_pairs, L.cpu_pairs, L.cpu_experts, L.cpu_bytes / 1e6, L.cpu_ms, L.gpu_ms, L.wait_ms,
                         100.0 * k.hit_rate(), k.admissions, k.evictions, k.refused_rate + k.refused_staging + k.refused_policy,
                         L.staged_experts, L.staged_bytes / 1e6, L.stage_ms, L.prompt_idle_ms);
    }
    return s;
}

nlohmann::json generate_result_json(const GenerateResult& r, const GenerateOptions& opt) {
    nlohmann::json j = {
        {"prompt_ids", r.prompt_ids},
        {"ids", r.ids},
        {"text", r.text},
        {"stop_reason", r.stop_reason},
        {"engine", r.engine},
        {"timings",
         {{"prompt_tokens", r.timings.n_prompt}, {"prompt_ms", r.timings.prompt_ms}, {"prompt_tok_s", r.timings.prompt_tok_s()},
          {"generated_tokens", r.ids.size()}, {"decode_ms", r.timings.decode_ms}, {"decode_tok_s", r.timings.decode_tok_s()},
          {"ttft_ms", r.timings.ttft_ms}}},
    };
    if (r.experts) j["experts"] = expert_counters_json(*r.experts);
    if (opt.n_probs > 0) {
        nlohmann::json p = nlohmann::json::array();
        for (const auto& v : r.probs) p.push_back(probs_json(v));
        j["probs"] = p;
        // margins: +inf (a layer with every expert selected) is written as null
        auto margins_json = [](const std::vector<float>& m) {
            nlohmann::json a = nlohmann::json::array();
            for (float v : m) a.push_back(std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr));
            return a;
        };
        if (!r.router_margins.empty()) j["router_margins"] = margins_json(r.router_margins);
        if (opt.echo) {
            nlohmann::json pp = nlohmann::json::array();
            for (const auto& v : r.prompt_probs) pp.push_back(probs_json(v));
            j["prompt_probs"] = pp;
            if (!r.prompt_router_margins.empty()) j["prompt_router_margins"] = margins_json(r.prompt_router_margins);
        }
    }
    return j;
}

}  // namespace nitro
