// What every architecture shares: the table builder, the checks of a file against a table, names
// of ids and categories. The architectures themselves are in their own files (arch/registry.cpp
// lists them).
#include "arch/arch.h"

#include "core/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <regex>

namespace nitro {

const char* tensor_id_name(TensorId id) {
    static constexpr const char* kNames[] = {
        "token_embd",         "output_norm",        "output",          "attn_norm",          "attn_q",
        "attn_q_bias",        "attn_k",             "attn_k_bias",     "attn_v",             "attn_v_bias",
        "attn_output",        "attn_output_bias",   "attn_q_norm",     "attn_k_norm",        "attn_sinks",
        "ffn_norm",           "ffn_gate_inp",       "ffn_gate_inp_bias", "ffn_exp_probs_b", "ffn_gate_exps",    "ffn_up_exps",
        "ffn_down_exps",      "ffn_gate_exps_bias", "ffn_up_exps_bias", "ffn_down_exps_bias", "ffn_gate_inp_shexp",
        "ffn_gate_shexp",     "ffn_up_shexp",       "ffn_down_shexp",  "ffn_gate",           "ffn_up",
        "ffn_down",           "attn_qkv",           "attn_gate",
        "ssm_in",             "ssm_conv1d",         "ssm_dt",          "ssm_a",              "ssm_ba",
        "ssm_beta",           "ssm_alpha",          "ssm_norm",        "ssm_out",
    };
    static_assert(sizeof(kNames) / sizeof(kNames[0]) == kTensorIds);
    const size_t i = static_cast<size_t>(id);
    return i < kTensorIds ? kNames[i] : "?";
}

const char* tensor_category_name(TensorCategory c) {
    switch (c) {
        case TensorCategory::Embedding: return "embedding";
        case TensorCategory::Output: return "output";
        case TensorCategory::Norm: return "norms";
        case TensorCategory::Attention: return "attention";
        case TensorCategory::Router: return "router";
        case TensorCategory::RoutedExpert: return "routed experts";
        case TensorCategory::SharedExpert: return "shared experts";
        case TensorCategory::DenseFfn: return "dense FFN";
        case TensorCategory::Recurrent: return "recurrent (DeltaNet)";
    }
    return "?";
}

bool tensor_kind_is_f32(TensorKind k) {
    switch (k) {
        case TensorKind::Embedding:
        case TensorKind::Output:
        case TensorKind::Matrix:
        case TensorKind::Router:
        case TensorKind::Expert: return false;
        default: return true;
    }
}

bool ArchConfig::recurrent() const {
    for (const LayerShape& l : layers)
        if (l.mixer == LayerKind::DeltaNet) return true;
    return false;
}

TensorSpec& TensorTable::add(TensorId id, std::string_view suffix, std::vector<int64_t> ne, TensorKind kind,
                             TensorCategory cat, int64_t fan_in) {
    TensorSpec t;
    t.id = id;
    t.layer = layer_;
    t.name = layer_ < 0 ? std::string(suffix) : fmt::format("blk.{}.{}", layer_, suffix);
    t.ne = std::move(ne);
    t.kind = kind;
    t.category = cat;
    t.fan_in = fan_in;
    rows_.push_back(std::move(t));
    return rows_.back();
}

TensorSpec& TensorTable::add_optional(TensorId id, std::string_view suffix, std::vector<int64_t> ne, TensorKind kind,
                                      TensorCategory cat, int64_t fan_in) {
    TensorSpec& t = add(id, suffix, std::move(ne), kind, cat, fan_in);
    t.required = false;
    return t;
}

std::string known_arch_names() {
    std::string s;
    for (const ArchInfo* a : all_archs()) s += (s.empty() ? "" : ", ") + std::string(a->name);
    return s;
}

const ArchInfo* find_arch(std::string_view name) {
    for (const ArchInfo* a : all_archs())
        if (a->name == name) return a;
    return nullptr;
}

const ArchInfo& require_arch(std::string_view name, std::string_view what) {
    const ArchInfo* a = find_arch(name);
    if (!a) fail("{}: architecture '{}' is not supported (known: {})", what, name, known_arch_names());
    return *a;
}

void validate_model_tensors(const GgufModel& model, const ModelHparams& hp, int64_t n_vocab) {
    const ArchInfo& arch = require_arch(hp.arch, model.path());
    const std::vector<TensorSpec> table = arch.tensors(hp, n_vocab);
    for (const auto& spec : table) {
        const GgufTensorInfo* t = model.find(spec.name);
        if (!t) {
            if (!spec.required) continue;
            if (spec.unless == TensorId::count) fail("{}: required tensor '{}' is missing", model.path(), spec.name);
            const auto alt = std::find_if(table.begin(), table.end(), [&](const TensorSpec& o) {
                return o.id == spec.unless && o.layer == spec.layer;
            });
            if (alt == table.end() || !model.find(alt->name))
                fail("{}: required tensor '{}' is missing (and so is '{}', the older layout that can replace it)",
                     model.path(), spec.name, alt == table.end() ? tensor_id_name(spec.unless) : alt->name);
            continue;
        }
        // Dimensions beyond the declared ones must be 1, as llama.cpp's check_tensor_dims compares
        // all four (a [n_embd, 1] ffn_gate_inp_shexp passes for a declared [n_embd]).
        bool ok = t->n_dims >= 1 && t->n_dims <= 4;
        for (size_t d = 0; ok && d < 4; ++d) ok = t->ne[d] == (d < spec.ne.size() ? spec.ne[d] : 1);
        if (!ok) {
            std::string want = "[";
            for (size_t d = 0; d < spec.ne.size(); ++d) want += (d ? ", " : "") + std::to_string(spec.ne[d]);
            fail("{}: tensor '{}' has shape {}, expected {} for this model's hyperparameters", model.path(), spec.name,
                 t->shape_string(), want + "]");
        }
    }
}

int tensor_layer(const std::string& name) {
    if (name.rfind("blk.", 0) != 0) return -1;
    size_t i = 4;
    int64_t v = 0;
    bool any = false;
    while (i < name.size() && name[i] >= '0' && name[i] <= '9' && v < 1000000) {
        v = v * 10 + (name[i] - '0');
        ++i;
        any = true;
    }
    return (any && i < name.size() && name[i] == '.') ? static_cast<int>(v) : -1;
}

TensorCategory guess_tensor_category(const std::string& name) {
    static const std::regex exps(R"(^blk\.\d+\.ffn_(gate|up|down|gate_up)_exps\..*)");
    static const std::regex shexp(R"(^blk\.\d+\.ffn_(gate|up|down|gate_inp)_shexp\..*)");
    static const std::regex dense_ffn(R"(^blk\.\d+\.ffn_(gate|up|down)\..*)");
    static const std::regex router(R"(^blk\.\d+\.(ffn_gate_inp|exp_probs_b)\..*)");
    if (name.rfind("token_embd.", 0) == 0) return TensorCategory::Embedding;
    if (name.rfind("output.", 0) == 0 || name.rfind("output_norm.", 0) == 0) return TensorCategory::Output;
    if (name.find("_exps.") != std::string::npos && std::regex_match(name, exps)) return TensorCategory::RoutedExpert;
    if (name.find("_shexp.") != std::string::npos && std::regex_match(name, shexp)) return TensorCategory::SharedExpert;
    if (std::regex_match(name, router)) return TensorCategory::Router;
    if (std::regex_match(name, dense_ffn)) return TensorCategory::DenseFfn;
    if (name.find("ssm_") != std::string::npos) return TensorCategory::Recurrent;
    if (name.find("_norm.") != std::string::npos && name.find("attn_q_norm") == std::string::npos &&
        name.find("attn_k_norm") == std::string::npos)
        return TensorCategory::Norm;
    return TensorCategory::Attention;
}

}  // namespace nitro
