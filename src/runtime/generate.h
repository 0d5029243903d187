// One-shot generation as `nitro run` does it: load, tokenize (or take ids), prefill, decode.
#pragma once

#include "runtime/engine.h"
#include "runtime/sampler.h"
#include "runtime/session.h"

#include <nlohmann/json_fwd.hpp>

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace nitro {

struct GenerateOptions {
    std::string model;
    std::string prompt;
    std::string prompt_file;
    std::vector<int32_t> prompt_ids;
    int64_t n_predict = 64;  ///< -1 or -2 (llama.cpp's): until end of generation or the context is full
    SamplerParams sampling;
    SessionOptions session;
    bool ctx_given = false;  ///< -c was given: warn when the engine caps it to the model's context (as serve does)
    EngineMode mode = EngineMode::Cpu;  ///< --mode cpu|gpu
    GpuOptions gpu;                     ///< --gpu, --vram-budget
    bool chat = false;
    std::string system_prompt;  ///< with chat: a system message before the prompt (llama.cpp's -sys)
    bool ignore_eos = false;
    int n_probs = 0;
    bool echo = false;
    std::string trace_path;  ///< capture the router's decisions to this trace file (docs/trace-format.md)
    /// BENCHMARK ONLY: replay the expert choices of this router trace (runtime/route_replay.h);
    /// the output is then not the model's. "" = the model's router.
    std::string route_replay;
    /// Called once the engine is made, before the prompt is evaluated (the CLI reads the weights
    /// there, with progress on a terminal, so page faults do not land in the TTFT). May be null.
    std::function<void(const Model&)> on_engine_ready;
};

struct Timings {
    double prompt_ms = 0, decode_ms = 0, ttft_ms = 0;
    int64_t n_prompt = 0, n_decode = 0;
    double prompt_tok_s() const { return prompt_ms > 0 ? 1000.0 * n_prompt / prompt_ms : 0; }
    double decode_tok_s() const { return decode_ms > 0 ? 1000.0 * n_decode / decode_ms : 0; }
};

struct GenerateResult {
    std::vector<int32_t> prompt_ids;
    std::vector<int32_t> ids;
    std::string text;
    Timings timings;
    std::vector<std::vector<TokenProb>> probs;         ///< per generated step (n_probs > 0)
    std::vector<std::vector<TokenProb>> prompt_probs;  ///< per prompt position (echo)
    /// With n_probs: the smallest router selection margin over the layers (RouteEvent::margin,
    /// nats) of the position each probs / prompt_probs entry was computed at; empty when the
    /// engine does not report routing.
    std::vector<float> router_margins, prompt_router_margins;
    std::string stop_reason;                           ///< "length" or "eos"
    std::string engine;                                ///< what ran it (Engine::describe)
    std::optional<ExpertCounters> experts;             ///< expert placement counters (GPU engines)
};

class Tokenizer;
/// Tokens that end generation: eos/eot from the metadata and the chat formats' end markers
/// (<|return|>, <|call|>, <|im_end|>, <|endoftext|>) present in the vocabulary as control tokens.
std::vector<int32_t> end_of_generation_tokens(const Model& model, const Tokenizer& tok);

/// Runs a generation. `on_text` receives decoded text as it is produced (may be null).
/// Throws nitro::Error for a bad model, bad prompt or context overflow.
GenerateResult generate(const GenerateOptions& opt, const std::function<void(const std::string&)>& on_text);

/// The `nitro run --json` object: {"prompt_ids","ids","text","timings",["probs"],["prompt_probs"],
/// ["experts"]}.
nlohmann::json generate_result_json(const GenerateResult& r, const GenerateOptions& opt);

/// The expert cache counters of one layer or the total, as JSON (the "cache" object of each layer).
nlohmann::json cache_counters_json(const CacheCounters& c);
/// Expert counters as JSON: totals and per layer, with the CALCULATED shares and rates.
nlohmann::json expert_counters_json(const ExpertCounters& c);
/// One line for humans: where the selected experts ran, what the CPU read and how fast, the GPU's
/// wait. Empty when nothing was counted.
std::string expert_counters_line(const ExpertCounters& c);
/// A per-layer table of the counters (nitro run --verbose).
std::string expert_counters_table(const ExpertCounters& c);

}  // namespace nitro
