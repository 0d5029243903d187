#include "cli/llama_flags.h"

#include "core/error.h"

#include <algorithm>

namespace nitro::cli {

namespace {

/// One llama.cpp flag (common/arg.cpp): its spellings, the nitro option it becomes, or what to
/// do instead. `optional` flags may stand without a value (old llama.cpp: `-fa` alone); then
/// `optional_default` is given when the next argument is not one of `values`.
struct LlamaFlag {
    std::vector<std::string> spellings;
    std::string nitro;    ///< long option of nitro; "" = nitro has none
    std::string instead;  ///< without `nitro`: the rest of "nitro has no X; ..."
    std::string optional_default;
    std::vector<std::string> values;
};

const char* kNoSpeculative =
    "nitro has no speculative decoding: a draft's tokens route to different experts, so checking them reads "
    "several times the expert bytes per accepted token of a MoE model";
const char* kSamplers = "nitro's samplers are --temp, --top-k, --top-p and --min-p";
const char* kThreadPinning = "pin the threads with taskset or numactl (-t sets how many)";
const char* kLogs = "nitro logs to stderr; -v adds the placement per layer and the expert counters";
const char* kNoShift =
    "it is not needed: nitro never shifts the context; a turn that does not fit -c ends (raise -c, or /reset in "
    "nitro chat)";
const char* kChatTemplate =
    "nitro has no Jinja engine: it recognises the model's chat format from its vocabulary (harmony for gpt-oss, "
    "ChatML for Qwen) and renders it exactly as the model's official template does (tested against Hugging Face "
    "renderings); other templates are not supported";

const std::vector<LlamaFlag>& table() {
    static const std::vector<LlamaFlag> t = {
        // Flags nitro has, under llama.cpp's spellings.
        {{"-ngl", "--gpu-layers", "--n-gpu-layers"}, "--n-gpu-layers", "", "", {}},
        {{"-fa", "--flash-attn"}, "--flash-attn", "", "on", {"on", "off", "auto", "1", "0", "true", "false"}},
        {{"-np", "--parallel"}, "--parallel", "", "", {}},
        {{"-ub", "--ubatch-size"}, "--ubatch-size", "", "", {}},
        {{"-b", "--batch-size"}, "--batch-size", "", "", {}},
        {{"-a", "--alias"}, "--alias", "", "", {}},
        {{"-cnv", "--conversation"}, "--conversation", "", "", {}},
        {{"-no-cnv", "--no-conversation"}, "--no-conversation", "", "", {}},
        {{"-i", "--interactive"}, "--interactive", "", "", {}},
        {{"-if", "--interactive-first"}, "--interactive-first", "", "", {}},
        {{"--jinja"}, "--jinja", "", "", {}},
        {{"--no-jinja"}, "--no-jinja", "", "", {}},
        {{"-ctk", "--cache-type-k"}, "--cache-type-k", "", "", {}},
        {{"-ctv", "--cache-type-v"}, "--cache-type-v", "", "", {}},
        {{"-tb", "--threads-batch"}, "--threads-batch", "", "", {}},
        {{"-s", "--seed"}, "--seed", "", "", {}},
        {{"-n", "--predict", "--n-predict"}, "--n-predict", "", "", {}},
        {{"-sys", "--system-prompt"}, "--system-prompt", "", "", {}},
        {{"-cmoe", "--cpu-moe"}, "--cpu-moe", "", "", {}},
        {{"-ncmoe", "--n-cpu-moe"}, "--n-cpu-moe", "", "", {}},
        {{"-ot", "--override-tensor"}, "--override-tensor", "", "", {}},
        {{"-hf", "-hfr", "--hf-repo"}, "--hf-repo", "", "", {}},
        {{"-mg", "--main-gpu"}, "--gpu", "", "", {}},
        {{"--threads-http"}, "--http-threads", "", "", {}},
        {{"-cb", "--cont-batching"}, "--cont-batching", "", "", {}},
        // Flags nitro does not have, and what to do instead.
        {{"-dev", "--device"}, "", "use --gpu N (the CUDA device index), or --mode cpu for none", "", {}},
        {{"-sm", "--split-mode"}, "", "nitro runs on one GPU (--gpu N) and computes the experts that do not fit its VRAM on the CPU", "", {}},
        {{"-ts", "--tensor-split"}, "", "nitro runs on one GPU (--gpu N) and computes the experts that do not fit its VRAM on the CPU", "", {}},
        {{"-nkvo", "--no-kv-offload"}, "", "the K/V cache stays with the attention, on the GPU when the model runs there; --mode cpu keeps everything on the CPU", "", {}},
        {{"-nocb", "--no-cont-batching"}, "", "use --parallel 1 (one request at a time)", "", {}},
        {{"--chat-template-file"}, "", kChatTemplate, "", {}},
        {{"--chat-template"}, "", kChatTemplate, "", {}},
        {{"-fit", "--fit"}, "", "it is not needed: nitro fits the model into --vram-budget by itself (nitro plan shows the placement)", "", {}},
        {{"-fitt", "--fit-target"}, "", "use --vram-budget GiB (nitro plan shows the placement)", "", {}},
        {{"--numa"}, "", "run nitro under numactl (e.g. numactl --interleave=all nitro ...)", "", {}},
        {{"-C", "--cpu-mask"}, "", kThreadPinning, "", {}},
        {{"-Cr", "--cpu-range"}, "", kThreadPinning, "", {}},
        {{"-Cb", "--cpu-mask-batch"}, "", kThreadPinning, "", {}},
        {{"-Crb", "--cpu-range-batch"}, "", kThreadPinning, "", {}},
        {{"--cpu-strict"}, "", kThreadPinning, "", {}},
        {{"--cpu-strict-batch"}, "", kThreadPinning, "", {}},
        {{"--prio"}, "", kThreadPinning, "", {}},
        {{"--prio-batch"}, "", kThreadPinning, "", {}},
        {{"--poll"}, "", kThreadPinning, "", {}},
        {{"--poll-batch"}, "", kThreadPinning, "", {}},
        {{"-r", "--reverse-prompt"}, "", "nitro chat ends a turn at the model's end-of-turn token (its chat format)", "", {}},
        {{"-e", "--escape"}, "", "-p takes its text as it is (no \\n escapes): use $'...' in the shell, or -f FILE", "", {}},
        {{"--no-escape"}, "", "it is not needed: -p takes its text as it is", "", {}},
        {{"-sp", "--special"}, "", "nitro run prints the text of the generated tokens; --json gives every token id", "", {}},
        {{"-st", "--single-turn"}, "", "it is not needed: nitro run without -cnv is one turn", "", {}},
        {{"-mli", "--multiline-input"}, "", "in nitro chat, end a line with \\ to continue the message on the next line", "", {}},
        {{"--in-prefix"}, "", "nitro chat wraps every message in the model's chat format", "", {}},
        {{"--in-suffix"}, "", "nitro chat wraps every message in the model's chat format", "", {}},
        {{"--in-prefix-bos"}, "", "nitro chat wraps every message in the model's chat format", "", {}},
        {{"-md", "--model-draft"}, "", kNoSpeculative, "", {}},
        {{"-ngld", "--gpu-layers-draft", "--n-gpu-layers-draft"}, "", kNoSpeculative, "", {}},
        {{"-cd", "--ctx-size-draft"}, "", kNoSpeculative, "", {}},
        {{"-devd", "--device-draft"}, "", kNoSpeculative, "", {}},
        {{"--draft", "--draft-n", "--draft-max"}, "", kNoSpeculative, "", {}},
        {{"--draft-min", "--draft-n-min"}, "", kNoSpeculative, "", {}},
        {{"--draft-p-min"}, "", kNoSpeculative, "", {}},
        {{"-ctkd", "--cache-type-k-draft"}, "", kNoSpeculative, "", {}},
        {{"-ctvd", "--cache-type-v-draft"}, "", kNoSpeculative, "", {}},
        {{"--lora"}, "", "nitro has no adapters: merge the adapter into the model (llama.cpp's llama-export-lora) and run the merged GGUF", "", {}},
        {{"--lora-scaled"}, "", "nitro has no adapters: merge the adapter into the model (llama.cpp's llama-export-lora) and run the merged GGUF", "", {}},
        {{"--control-vector"}, "", "nitro has no control vectors", "", {}},
        {{"--control-vector-scaled"}, "", "nitro has no control vectors", "", {}},
        {{"--rope-scaling"}, "", "nitro takes RoPE and YaRN settings from the GGUF metadata", "", {}},
        {{"--rope-scale"}, "", "nitro takes RoPE and YaRN settings from the GGUF metadata", "", {}},
        {{"--rope-freq-base"}, "", "nitro takes RoPE and YaRN settings from the GGUF metadata", "", {}},
        {{"--rope-freq-scale"}, "", "nitro takes RoPE and YaRN settings from the GGUF metadata", "", {}},
        {{"--yarn-orig-ctx"}, "", "nitro takes RoPE and YaRN settings from the GGUF metadata", "", {}},
        {{"--yarn-ext-factor"}, "", "nitro takes RoPE and YaRN settings from the GGUF metadata", "", {}},
        {{"--yarn-attn-factor"}, "", "nitro takes RoPE and YaRN settings from the GGUF metadata", "", {}},
        {{"--yarn-beta-slow"}, "", "nitro takes RoPE and YaRN settings from the GGUF metadata", "", {}},
        {{"--yarn-beta-fast"}, "", "nitro takes RoPE and YaRN settings from the GGUF metadata", "", {}},
        {{"-gan", "--grp-attn-n"}, "", "nitro has no self-extend: -c is capped at the model's training context", "", {}},
        {{"-gaw", "--grp-attn-w"}, "", "nitro has no self-extend: -c is capped at the model's training context", "", {}},
        {{"--repeat-penalty"}, "", kSamplers, "", {}},
        {{"--repeat-last-n"}, "", kSamplers, "", {}},
        {{"--presence-penalty"}, "", kSamplers, "", {}},
        {{"--frequency-penalty"}, "", kSamplers, "", {}},
        {{"--mirostat"}, "", kSamplers, "", {}},
        {{"--mirostat-lr"}, "", kSamplers, "", {}},
        {{"--mirostat-ent"}, "", kSamplers, "", {}},
        {{"--typical"}, "", kSamplers, "", {}},
        {{"--top-nsigma"}, "", kSamplers, "", {}},
        {{"--xtc-probability"}, "", kSamplers, "", {}},
        {{"--xtc-threshold"}, "", kSamplers, "", {}},
        {{"--dry-multiplier"}, "", kSamplers, "", {}},
        {{"--dry-base"}, "", kSamplers, "", {}},
        {{"--dry-allowed-length"}, "", kSamplers, "", {}},
        {{"--dry-penalty-last-n"}, "", kSamplers, "", {}},
        {{"--dry-sequence-breaker"}, "", kSamplers, "", {}},
        {{"--dynatemp-range"}, "", kSamplers, "", {}},
        {{"--dynatemp-exp"}, "", kSamplers, "", {}},
        {{"--samplers"}, "", kSamplers, "", {}},
        {{"--sampling-seq", "--sampler-seq"}, "", kSamplers, "", {}},
        {{"-l", "--logit-bias"}, "", kSamplers, "", {}},
        {{"--grammar"}, "", "nitro serve constrains output per request (response_format {\"type\": \"json_schema\"}); nitro run has no grammar", "", {}},
        {{"--grammar-file"}, "", "nitro serve constrains output per request (response_format {\"type\": \"json_schema\"}); nitro run has no grammar", "", {}},
        {{"-j", "--json-schema"}, "", "nitro serve constrains output per request (response_format {\"type\": \"json_schema\"}); nitro run has no grammar", "", {}},
        {{"-jf", "--json-schema-file"}, "", "nitro serve constrains output per request (response_format {\"type\": \"json_schema\"}); nitro run has no grammar", "", {}},
        {{"--keep"}, "", kNoShift, "", {}},
        {{"--context-shift"}, "", kNoShift, "", {}},
        {{"--no-context-shift"}, "", kNoShift, "", {}},
        {{"-dt", "--defrag-thold"}, "", "it is not needed: nitro's K/V cache is never fragmented", "", {}},
        {{"-kvu", "--kv-unified"}, "", "each --parallel slot has its own K/V cache of -c tokens and keeps the prefix of its last request for reuse", "", {}},
        {{"--swa-full"}, "", "it is not needed: nitro keeps a window-sized K/V ring for sliding-window layers and reuses prefixes within it", "", {}},
        {{"--cache-reuse"}, "", "it is not needed: nitro serve reuses the longest cached prompt prefix of a slot by itself", "", {}},
        {{"--slot-save-path"}, "", "nitro serve does not save slots to disk", "", {}},
        {{"--embedding", "--embeddings"}, "", "nitro serves completions and chat completions, no embeddings", "", {}},
        {{"--reranking", "--rerank"}, "", "nitro serves completions and chat completions, no reranking", "", {}},
        {{"--pooling"}, "", "nitro serves completions and chat completions, no embeddings", "", {}},
        {{"--api-key-file"}, "", "use --api-key KEY or the NITRO_API_KEY environment variable", "", {}},
        {{"--metrics"}, "", "it is not needed: nitro serve always serves GET /metrics", "", {}},
        {{"-to", "--timeout"}, "", "nitro serve has no request timeout: a request ends at max_tokens, at the end of generation, or when its client disconnects", "", {}},
        {{"--override-kv"}, "", "nitro reads the GGUF metadata as written (edit the file with llama.cpp's gguf-py tools)", "", {}},
        {{"--color"}, "", "it is not needed: nitro chat dims the model's reasoning on a terminal", "", {}},
        {{"--no-warmup"}, "", "it is not needed: nitro runs no warm-up generation", "", {}},
        {{"--no-perf"}, "", "the timing line goes to stderr (2>/dev/null hides it)", "", {}},
        {{"-lv", "--verbosity", "--log-verbosity"}, "", kLogs, "", {}},
        {{"--log-file"}, "", kLogs, "", {}},
        {{"--log-disable"}, "", kLogs, "", {}},
        {{"--log-colors"}, "", kLogs, "", {}},
        {{"--log-prefix"}, "", kLogs, "", {}},
        {{"--log-timestamps"}, "", kLogs, "", {}},
        {{"--verbose-prompt"}, "", "nitro tokenize prints a prompt's token ids", "", {}},
        {{"-nr", "--no-repack"}, "", "it is not needed: nitro lays the weights out for its kernels by itself", "", {}},
        {{"--no-op-offload"}, "", "it is not needed: nitro decides per expert and per prompt chunk where the work runs (--prefill-cost-model)", "", {}},
        {{"--check-tensors"}, "", "it is not needed: nitro checks every tensor's type and shape at load", "", {}},
        {{"--reasoning-format"}, "", "nitro serve returns the reasoning in reasoning_content; nitro chat shows it dimmed", "", {}},
        {{"-mm", "--mmproj"}, "", "nitro runs text models only (no vision input)", "", {}},
        {{"--image"}, "", "nitro runs text models only (no vision input)", "", {}},
    };
    return t;
}

const LlamaFlag* find_flag(const std::string& name) {
    for (const LlamaFlag& f : table())
        if (std::find(f.spellings.begin(), f.spellings.end(), name) != f.spellings.end()) return &f;
    return nullptr;
}

std::string join_commands(const std::vector<std::string>& names) {
    std::string s;
    for (size_t i = 0; i < names.size(); ++i)
        s += (i == 0 ? "" : i + 1 == names.size() ? " and " : ", ") + names[i];
    return s;
}

}  // namespace

std::vector<std::string> rewrite_llama_flags(const std::string& command, const std::vector<std::string>& args,
                                             const CommandOptions& options) {
    std::vector<std::string> out;
    out.reserve(args.size() + 1);
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string& arg = args[i];
        if (arg == "--") {  // everything after it is positional
            out.insert(out.end(), args.begin() + static_cast<long>(i), args.end());
            break;
        }
        if (arg.size() < 2 || arg[0] != '-' || (arg[1] >= '0' && arg[1] <= '9')) {  // a positional or a negative number
            out.push_back(arg);
            continue;
        }
        // --name=value: the name decides; the value stays attached.
        const size_t eq = arg.rfind("--", 0) == 0 ? arg.find('=') : std::string::npos;
        const std::string name = arg.substr(0, eq);
        const std::string attached = eq == std::string::npos ? "" : arg.substr(eq);
        const LlamaFlag* f = find_flag(name);
        std::string target = name;
        if (!options.has(command, name)) {
            if (!f) {  // not llama.cpp's either: CLI11 reports it
                out.push_back(arg);
                continue;
            }
            if (f->nitro.empty()) fail("nitro has no {}; {}", name, f->instead);
            if (!options.has(command, f->nitro)) {
                std::vector<std::string> with;
                for (const std::string& c : options.commands())
                    if (options.has(c, f->nitro)) with.push_back("nitro " + c);
                if (with.empty()) fail("nitro {} has no {}", command, name);
                fail("nitro {} has no {} ({}); {} {} it", command, name, f->nitro, join_commands(with),
                     with.size() == 1 ? "has" : "have");
            }
            target = f->nitro;
        }
        if (f && !f->optional_default.empty() && attached.empty()) {
            // A flag that may stand alone (`-fa` of older llama.cpp): its value only if one follows.
            const bool value_follows =
                i + 1 < args.size() && std::find(f->values.begin(), f->values.end(), args[i + 1]) != f->values.end();
            if (!value_follows) {
                out.push_back(target + "=" + f->optional_default);
                continue;
            }
        }
        out.push_back(target + attached);
        if (attached.empty() && options.takes_value(command, target) && i + 1 < args.size()) out.push_back(args[++i]);
    }
    return out;
}

std::vector<LlamaFlagInfo> llama_flag_table() {
    std::vector<LlamaFlagInfo> v;
    for (const LlamaFlag& f : table()) v.push_back({f.spellings, f.nitro, f.instead});
    return v;
}

}  // namespace nitro::cli
