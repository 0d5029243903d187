#include "runtime/generate.h"

#include "core/error.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <fstream>
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

GenerateResult generate(const GenerateOptions& opt, const std::function<void(const std::string&)>& on_text) {
    if (opt.model.empty()) fail("no model given (-m MODEL.gguf)");
    Model model(opt.model);
    GenerateResult r;
    int n_sources = !opt.prompt.empty() + !opt.prompt_file.empty() + !opt.prompt_ids.empty();
    if (n_sources > 1) fail("give the prompt one way only: -p, -f or --prompt-ids");
    if (!opt.prompt_ids.empty()) {
        r.prompt_ids = opt.prompt_ids;
    } else {
        fail("text prompts need the tokenizer, which this build does not have yet; use --prompt-ids");
    }
    if (r.prompt_ids.empty()) fail("the prompt is empty");
    if (opt.n_predict < 0) fail("-n must not be negative (got {})", opt.n_predict);

    std::unique_ptr<Engine> engine = make_engine(opt.mode, model, opt.session, opt.gpu);
    Engine& session = *engine;
    if (static_cast<int64_t>(r.prompt_ids.size()) + opt.n_predict > session.n_ctx())
        fail("the prompt ({} tokens) plus {} generated tokens do not fit the context of {} tokens (-c)",
             r.prompt_ids.size(), opt.n_predict, session.n_ctx());
    const int64_t eos = model.gguf().metadata().get_int("tokenizer.ggml.eos_token_id").value_or(-1);
    Sampler sampler(opt.sampling);
    const int64_t V = model.n_vocab();
    std::vector<float> logits;

    const auto t0 = Clock::now();
    const bool all = opt.echo && opt.n_probs > 0;
    session.eval(r.prompt_ids, all, logits);
    r.timings.prompt_ms = ms_since(t0);
    r.timings.n_prompt = static_cast<int64_t>(r.prompt_ids.size());
    if (all)
        for (size_t i = 0; i < r.prompt_ids.size(); ++i)
            r.prompt_probs.push_back(top_probs(std::span<const float>(logits.data() + i * V, static_cast<size_t>(V)), opt.n_probs));
    std::span<const float> last(logits.data() + (all ? (r.prompt_ids.size() - 1) * V : 0), static_cast<size_t>(V));

    r.stop_reason = "length";
    const auto t1 = Clock::now();
    for (int64_t step = 0; step < opt.n_predict; ++step) {
        if (opt.n_probs > 0) r.probs.push_back(top_probs(last, opt.n_probs));
        const int32_t tok = sampler.sample(last);
        if (step == 0) r.timings.ttft_ms = ms_since(t0);
        r.ids.push_back(tok);
        if (tok == eos && !opt.ignore_eos) {
            r.stop_reason = "eos";
            break;
        }
        if (step + 1 == opt.n_predict) break;
        const int32_t one[1] = {tok};
        session.eval(one, false, logits);
        last = std::span<const float>(logits.data(), static_cast<size_t>(V));
    }
    r.timings.decode_ms = ms_since(t1);
    r.timings.n_decode = static_cast<int64_t>(r.ids.size()) > 0 ? static_cast<int64_t>(r.ids.size()) - 1 : 0;
    r.engine = engine->describe();
    (void)on_text;
    return r;
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
    if (opt.n_probs > 0) {
        nlohmann::json p = nlohmann::json::array();
        for (const auto& v : r.probs) p.push_back(probs_json(v));
        j["probs"] = p;
        if (opt.echo) {
            nlohmann::json pp = nlohmann::json::array();
            for (const auto& v : r.prompt_probs) pp.push_back(probs_json(v));
            j["prompt_probs"] = pp;
        }
    }
    return j;
}

}  // namespace nitro
