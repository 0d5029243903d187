#include "arch/summary.h"

#include "core/error.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <unordered_map>


namespace nitro {

ModelSummary summarize_model(const GgufModel& model) {
    ModelSummary s;
    const auto& m = model.metadata();
    s.path = model.path();
    s.n_shards = static_cast<int>(model.shards().size());
    s.gguf_version = model.shards().front()->version();
    s.file_bytes = model.total_file_bytes();
    try {
        s.hp = read_hparams(m);
    } catch (const Error& e) {
        s.hp = ModelHparams{};
        s.hp.arch = m.get_string("general.architecture").value_or("");
        s.hparams_error = e.what();
    }
    s.tokenizer_model = m.get_string("tokenizer.ggml.model").value_or("");
    s.tokenizer_pre = m.get_string("tokenizer.ggml.pre").value_or("");
    if (const GgufArray* a = m.get_array("tokenizer.ggml.tokens")) s.vocab_size = static_cast<int64_t>(a->size());
    if (const GgufArray* a = m.get_array("tokenizer.ggml.merges")) s.n_merges = static_cast<int64_t>(a->size());
    s.has_chat_template = m.has("tokenizer.chat_template");
    for (TensorCategory c : kTensorCategories) s.bytes_by_category[c] = 0;
    // Categories from the architecture's table where this build knows it (and the hyperparameters
    // read), else by llama.cpp's naming conventions.
    std::unordered_map<std::string, TensorCategory> table;
    if (const ArchInfo* arch = s.hparams_error.empty() ? find_arch(s.hp.arch) : nullptr) {
        const GgufTensorInfo* te = model.find("token_embd.weight");
        for (const TensorSpec& t : arch->tensors(s.hp, te ? te->ne[1] : 0)) table.emplace(t.name, t.category);
    }
    s.expert_bytes_per_layer.assign(static_cast<size_t>(s.hp.n_layer), 0);
    std::vector<uint64_t> weight_bytes(static_cast<size_t>(s.hp.n_layer), 0);  // per layer: the weight matrices
    for (const auto& t : model.tensors()) {
        ++s.n_tensors;
        s.n_params += t.n_elements();
        s.tensor_bytes += t.n_bytes;
        auto& u = s.types[t.type];
        ++u.n_tensors;
        u.n_bytes += t.n_bytes;
        u.n_elements += t.n_elements();
        const auto known = table.find(t.name);
        const TensorCategory c = known != table.end() ? known->second : guess_tensor_category(t.name);
        s.bytes_by_category[c] += t.n_bytes;
        if (c == TensorCategory::RoutedExpert) {
            const int layer = tensor_layer(t.name);
            if (layer < 0 || layer >= 4096 || (s.hparams_error.empty() && layer >= s.hp.n_layer))
                fail("{}: expert tensor '{}' names layer {}, but the model has {} layers", model.path(), t.name,
                     layer, s.hp.n_layer);
            if (static_cast<size_t>(layer) >= s.expert_bytes_per_layer.size())
                s.expert_bytes_per_layer.resize(static_cast<size_t>(layer) + 1, 0);
            s.expert_bytes_per_layer[static_cast<size_t>(layer)] += t.n_bytes;
            if (weight_bytes.size() < s.expert_bytes_per_layer.size()) weight_bytes.resize(s.expert_bytes_per_layer.size(), 0);
            if (t.name.ends_with(".weight")) weight_bytes[static_cast<size_t>(layer)] += t.n_bytes;
        }
    }
    s.bytes_per_expert_per_layer.assign(s.expert_bytes_per_layer.size(), 0);
    if (s.hp.n_expert > 0) {
        for (size_t l = 0; l < s.expert_bytes_per_layer.size(); ++l) {
            const auto X = static_cast<uint64_t>(s.hp.n_expert);
            s.bytes_per_expert_per_layer[l] = weight_bytes[l] / X;
            s.bytes_per_expert = std::max(s.bytes_per_expert, s.bytes_per_expert_per_layer[l]);
            s.bias_bytes_per_expert = std::max(s.bias_bytes_per_expert, (s.expert_bytes_per_layer[l] - weight_bytes[l]) / X);
        }
    }
    return s;
}

nlohmann::json summary_to_json(const ModelSummary& s) {
    using nlohmann::json;
    const auto& h = s.hp;
    json types = json::object();
    for (const auto& [t, u] : s.types)
        types[type_display_name(t)] = {{"tensors", u.n_tensors}, {"bytes", u.n_bytes}, {"elements", u.n_elements}};
    json cats = json::object();
    for (const auto& [c, b] : s.bytes_by_category) cats[tensor_category_name(c)] = b;
    return json{
        {"path", s.path},
        {"gguf_version", s.gguf_version},
        {"n_shards", s.n_shards},
        {"file_bytes", s.file_bytes},
        {"architecture", h.arch},
        {"name", h.name},
        {"hparams_error", s.hparams_error},
        {"hparams",
         {{"n_layer", h.n_layer}, {"n_embd", h.n_embd}, {"n_head", h.n_head}, {"n_head_kv", h.n_head_kv},
          {"head_dim", h.head_dim}, {"head_dim_v", h.head_dim_v}, {"n_ff", h.n_ff}, {"n_expert", h.n_expert},
          {"n_expert_used", h.n_expert_used}, {"n_expert_shared", h.n_expert_shared}, {"n_ff_exp", h.n_ff_exp},
          {"n_ff_shexp", h.n_ff_shexp}, {"n_ctx_train", h.n_ctx_train}, {"sliding_window", h.sliding_window},
          {"rms_eps", h.rms_eps}, {"rope_freq_base", h.rope_freq_base}, {"rope_dim", h.rope_dim},
          {"rope_scaling", h.rope_scaling}, {"rope_scaling_factor", h.rope_scaling_factor},
          {"rope_orig_ctx", h.rope_orig_ctx}}},
        {"tokenizer",
         {{"model", s.tokenizer_model}, {"pre", s.tokenizer_pre}, {"vocab_size", s.vocab_size},
          {"n_merges", s.n_merges}, {"chat_template", s.has_chat_template}}},
        {"n_tensors", s.n_tensors},
        {"n_params", s.n_params},
        {"tensor_bytes", s.tensor_bytes},
        {"types", types},
        {"bytes_by_category", cats},
        {"expert_bytes_per_layer", s.expert_bytes_per_layer},
        {"bytes_per_expert_per_layer", s.bytes_per_expert_per_layer},
        {"bytes_per_expert", s.bytes_per_expert},
        {"bias_bytes_per_expert", s.bias_bytes_per_expert},
    };
}

std::string summary_to_text(const ModelSummary& s) {
    const auto& h = s.hp;
    std::string o;
    auto line = [&](std::string_view k, const std::string& v) { o += fmt::format("{:<22} {}\n", k, v); };
    line("file", fmt::format("{} ({}, {} bytes, GGUF v{}, {} shard{})", s.path, format_bytes(s.file_bytes),
                             s.file_bytes, s.gguf_version, s.n_shards, s.n_shards == 1 ? "" : "s"));
    line("architecture", h.arch + (h.name.empty() ? "" : "  (" + h.name + ")"));
    if (!s.hparams_error.empty()) {
        line("hyperparameters", "unavailable: " + s.hparams_error);
    } else {
    line("n_layer", std::to_string(h.n_layer));
    line("n_embd", std::to_string(h.n_embd));
    line("n_head / n_head_kv", fmt::format("{} / {}", h.n_head, h.n_head_kv));
    line("head_dim", h.head_dim_v == h.head_dim ? std::to_string(h.head_dim)
                                                : fmt::format("{} (k), {} (v)", h.head_dim, h.head_dim_v));
    if (h.n_expert > 0) {
        line("n_expert / used", fmt::format("{} / {}", h.n_expert, h.n_expert_used));
        line("n_ff_exp", std::to_string(h.n_ff_exp));
        if (h.n_expert_shared > 0 || h.n_ff_shexp > 0)
            line("shared experts", fmt::format("{} (n_ff_shexp {})", h.n_expert_shared, h.n_ff_shexp));
    }
    if (h.n_ff > 0) line("n_ff", std::to_string(h.n_ff));
    line("context length", fmt::format("{} tokens", h.n_ctx_train));
    if (h.sliding_window > 0) line("sliding window", fmt::format("{} tokens", h.sliding_window));
    line("rms_eps", fmt::format("{:g}", h.rms_eps));
    std::string rope = fmt::format("freq_base {:g}, dim {}", h.rope_freq_base, h.rope_dim);
    if (!h.rope_scaling.empty() && h.rope_scaling != "none")
        rope += fmt::format(", scaling {} x{:g} (original context {} tokens)", h.rope_scaling, h.rope_scaling_factor,
                            h.rope_orig_ctx);
    line("rope", rope);
    }
    line("tokenizer", s.tokenizer_model.empty()
                          ? std::string("none")
                          : fmt::format("{} (pre '{}'), {} tokens, {} merges{}", s.tokenizer_model, s.tokenizer_pre,
                                        s.vocab_size, s.n_merges, s.has_chat_template ? ", chat template" : ""));
    line("tensors", fmt::format("{} tensors, {:.3f} B params, {}", s.n_tensors, static_cast<double>(s.n_params) / 1e9,
                                format_bytes(s.tensor_bytes)));
    o += "\ntensor types:\n";
    for (const auto& [t, u] : s.types)
        o += fmt::format("  {:<8} {:>6} tensors  {:>12}  {:>6.2f}%\n", type_display_name(t), u.n_tensors,
                         format_bytes(u.n_bytes), s.tensor_bytes ? 100.0 * u.n_bytes / s.tensor_bytes : 0.0);
    o += "\nbytes by category:\n";
    for (const auto& [c, b] : s.bytes_by_category)
        if (b > 0)
            o += fmt::format("  {:<28} {:>12}  {:>6.2f}%\n", tensor_category_name(c), format_bytes(b),
                             s.tensor_bytes ? 100.0 * b / s.tensor_bytes : 0.0);
    if (s.hp.n_expert > 0) {
        bool uniform = true;
        for (auto b : s.bytes_per_expert_per_layer) uniform &= b == s.bytes_per_expert;
        o += fmt::format("  {:<28} {} ({} bytes: gate, up and down weights, one VRAM slot){}\n", "per expert per layer",
                         format_bytes(s.bytes_per_expert), s.bytes_per_expert,
                         uniform ? "" : " (largest layer; layers differ, see --json)");
        if (s.bias_bytes_per_expert > 0)
            o += fmt::format("  {:<28} {} per expert, kept with the dense core\n", "expert biases",
                             format_bytes(s.bias_bytes_per_expert));
    }
    return o;
}

}  // namespace nitro
