// Constrained decoding cost per token on the gpt-oss vocabulary (o200k_harmony, 201,088 tokens,
// from the GGUF fixture): the token mask in each kind of state (header, free reasoning text, JSON
// structure, key, string with and without maxLength, number), advancing the automaton by one
// token, and the sampler with and without a mask at OpenAI's defaults (temperature 1, no top-k,
// so every allowed token is a candidate) and greedy, on random logits; building the vocabulary
// index (once per model) and a loop table (once per lexer state).
//   build/bench/bench_grammar [--benchmark_filter=Mask]
#include "gguf/gguf.h"
#include "grammar/json_schema.h"
#include "grammar/response_constraint.h"
#include "runtime/sampler.h"
#include "tokenizer/bpe.h"
#include "tokenizer/chat_parse.h"

#include <benchmark/benchmark.h>

#include <memory>
#include <random>

namespace {

using namespace nitro;
using namespace nitro::grammar;
using json = nlohmann::ordered_json;

const Tokenizer& tok() {
    static const std::unique_ptr<Tokenizer> t = [] {
        GgufModel m(std::string(NITRO_SHARED_DIR) + "/fixtures/tiny-gptoss-mxfp4.gguf");
        return std::make_unique<Tokenizer>(Tokenizer::from_gguf(m.metadata()));
    }();
    return *t;
}

std::shared_ptr<const VocabIndex> index() {
    static const auto v = std::make_shared<const VocabIndex>(tok().vocab());
    return v;
}

const char* kSchema = R"({"type":"object","properties":{"name":{"type":"string","maxLength":40},"age":{"type":"integer"},
    "bio":{"type":"string"},"tags":{"type":"array","items":{"type":"string"}}},"required":["name","age","bio","tags"]})";

struct State {
    const char* name;
    const char* prefix;
};
const State kStates[] = {
    {"header", ""},
    {"reasoning", "<|channel|>analysis<|message|>Let me think"},
    {"value_start", "<|channel|>final<|message|>"},
    {"key", "<|channel|>final<|message|>{\"name\": \"A\", \""},
    {"string_maxLength", "<|channel|>final<|message|>{\"name\": \"An"},
    {"number", "<|channel|>final<|message|>{\"name\": \"A\", \"age\": 4"},
    {"string_free", "<|channel|>final<|message|>{\"name\": \"A\", \"age\": 4, \"bio\": \"Once upon"},
    {"array_item", "<|channel|>final<|message|>{\"name\": \"A\", \"age\": 4, \"bio\": \"\", \"tags\": [\"x\", "},
};

std::unique_ptr<ResponseConstraint> constraint_at(const State& s) {
    auto g = std::make_shared<Grammar>();
    const uint32_t root = compile_json_schema(json::parse(kSchema), *g);
    ResponseGrammarOptions o;
    o.envelope = Envelope::HARMONY;
    o.end_of_generation = chat_stop_tokens(ChatFormat::HARMONY, tok());
    add_response_program(*g, root, tok().vocab(), o);
    auto c = std::make_unique<ResponseConstraint>(index(), g, -1);
    EncodeOptions e;
    e.parse_special = true;
    for (int32_t id : tok().encode(s.prefix, e)) c->accept(id);
    return c;
}

void BM_Mask(benchmark::State& st) {
    const State& s = kStates[st.range(0)];
    st.SetLabel(s.name);
    auto c = constraint_at(s);
    std::vector<uint64_t> mask;
    c->allowed_tokens(mask);  // loop tables built once per vocabulary
    for (auto _ : st) {
        c->allowed_tokens(mask);
        benchmark::DoNotOptimize(mask.data());
    }
}
BENCHMARK(BM_Mask)->DenseRange(0, static_cast<int>(std::size(kStates)) - 1)->Unit(benchmark::kMicrosecond);

void BM_AcceptToken(benchmark::State& st) {
    // Advance by " word" inside the free string, then rebuild (the rebuild is not timed).
    const int32_t id = tok().encode(" upon")[0];
    for (auto _ : st) {
        st.PauseTiming();
        auto c = constraint_at(kStates[6]);
        st.ResumeTiming();
        c->accept(id);
    }
}
BENCHMARK(BM_AcceptToken)->Unit(benchmark::kMicrosecond);

void BM_BuildVocabIndex(benchmark::State& st) {
    const bool with_loop = st.range(0) != 0;
    st.SetLabel(with_loop ? "index + the string loop table of one lexer state" : "index (byte trie, text-token set)");
    for (auto _ : st) {
        VocabIndex v(tok().vocab());
        if (with_loop) benchmark::DoNotOptimize(v.string_loop(0).leave.size());
        benchmark::DoNotOptimize(v.trie().size());
    }
}
BENCHMARK(BM_BuildVocabIndex)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

std::vector<float> random_logits(size_t n) {
    std::mt19937 rng(1);
    std::normal_distribution<float> d(0.0f, 3.0f);
    std::vector<float> l(n);
    for (auto& x : l) x = d(rng);
    return l;
}

void BM_Sample(benchmark::State& st) {
    const bool masked = st.range(0) != 0;
    const bool greedy = st.range(1) != 0;
    st.SetLabel(std::string(masked ? "mask (in a free string)" : "no mask") + (greedy ? ", greedy" : ", temperature 1, top-k off"));
    const std::vector<float> logits = random_logits(static_cast<size_t>(tok().vocab().size()));
    auto c = constraint_at(kStates[6]);
    std::vector<uint64_t> mask;
    c->allowed_tokens(mask);
    SamplerParams p;
    p.temperature = greedy ? 0.0f : 1.0f;
    p.top_k = 0;
    Sampler s(p);
    for (auto _ : st) benchmark::DoNotOptimize(s.sample(logits, masked ? &mask : nullptr));
}
BENCHMARK(BM_Sample)->ArgsProduct({{0, 1}, {0, 1}})->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
