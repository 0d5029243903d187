#include "arch/hparams.h"

#include "core/error.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <variant>

namespace nitro {

namespace {

constexpr int64_t kMaxLayers = 4096;
constexpr int64_t kMaxExperts = 65536;

/// Some keys (head_count_kv in models with per-layer attention) may be arrays; take the maximum.
int64_t int_or_array_max(const GgufMetadata& m, const std::string& key, int64_t fallback) {
    const GgufValue* v = m.find(key);
    if (!v) return fallback;
    if (gguf_value_type(*v) == GgufType::ARRAY) {
        const GgufArray* a = m.get_array(key);
        int64_t best = fallback;
        bool any = false;
        std::visit(
            [&](const auto& vec) {
                using E = typename std::decay_t<decltype(vec)>::value_type;
                if constexpr (std::is_integral_v<E> && !std::is_same_v<E, bool>)
                    for (auto x : vec) { best = any ? std::max<int64_t>(best, x) : x; any = true; }
                else fail("{}: metadata key '{}' is an array of non-integers", m.source, key);
            },
            a->data);
        return best;
    }
    return *m.get_int(key);
}

}  // namespace

ModelHparams read_hparams(const GgufMetadata& m) {
    ModelHparams h;
    auto arch = m.get_string("general.architecture");
    if (!arch) fail("{}: metadata key 'general.architecture' is missing", m.source);
    h.arch = *arch;
    h.name = m.get_string("general.name").value_or("");
    const std::string a = h.arch + ".";
    auto req = [&](const std::string& k) {
        auto v = m.get_int(a + k);
        if (!v) fail("{}: metadata key '{}' is missing (required for architecture '{}')", m.source, a + k, h.arch);
        if (*v <= 0) fail("{}: metadata key '{}' = {} must be positive", m.source, a + k, *v);
        return *v;
    };
    h.n_layer = req("block_count");
    h.n_embd = req("embedding_length");
    h.n_head = int_or_array_max(m, a + "attention.head_count", 0);
    if (h.n_head <= 0) fail("{}: metadata key '{}attention.head_count' is missing or not positive", m.source, a);
    h.n_head_kv = int_or_array_max(m, a + "attention.head_count_kv", h.n_head);
    h.head_dim = m.get_int(a + "attention.key_length").value_or(h.n_embd / h.n_head);
    h.head_dim_v = m.get_int(a + "attention.value_length").value_or(h.head_dim);
    h.n_ff = int_or_array_max(m, a + "feed_forward_length", 0);
    h.n_expert = m.get_int(a + "expert_count").value_or(0);
    h.n_expert_used = m.get_int(a + "expert_used_count").value_or(0);
    h.n_expert_shared = m.get_int(a + "expert_shared_count").value_or(0);
    h.n_ff_exp = m.get_int(a + "expert_feed_forward_length").value_or(0);
    h.n_ff_shexp = m.get_int(a + "expert_shared_feed_forward_length").value_or(0);
    h.n_ctx_train = m.get_int(a + "context_length").value_or(0);
    h.sliding_window = m.get_int(a + "attention.sliding_window").value_or(0);
    // Float keys: a NaN, an infinity or a non-positive base/epsilon makes every logit NaN (found
    // with a patched file that loaded and then decoded token 0 at uniform probabilities).
    auto real = [&](const std::string& k, double fallback, bool positive) {
        const auto v = m.get_float(a + k);
        if (!v) return fallback;
        if (!std::isfinite(*v) || (positive ? *v <= 0 : *v < 0))
            fail("{}: metadata key '{}' = {} must be a finite number {}", m.source, a + k, *v, positive ? "> 0" : ">= 0");
        return *v;
    };
    h.rms_eps = real("attention.layer_norm_rms_epsilon", 0, true);
    h.rope_freq_base = real("rope.freq_base", 10000.0, true);
    h.rope_dim = m.get_int(a + "rope.dimension_count").value_or(h.head_dim);
    h.rope_scaling = m.get_string(a + "rope.scaling.type").value_or("");
    h.rope_scaling_factor = real("rope.scaling.factor", 0, false);
    h.rope_orig_ctx = m.get_int(a + "rope.scaling.original_context_length").value_or(0);
    h.rope_yarn_beta_fast = real("rope.scaling.yarn_beta_fast", 32.0, false);
    h.rope_yarn_beta_slow = real("rope.scaling.yarn_beta_slow", 1.0, false);
    h.swa_period = m.get_int(a + "attention.sliding_window_pattern").value_or(0);
    // Gated DeltaNet layers (llama.cpp LLM_KV_SSM_*, qwen3next / qwen35moe load_arch_hparams).
    h.ssm_d_conv = m.get_int(a + "ssm.conv_kernel").value_or(0);
    h.ssm_d_inner = m.get_int(a + "ssm.inner_size").value_or(0);
    h.ssm_d_state = m.get_int(a + "ssm.state_size").value_or(0);
    h.ssm_dt_rank = m.get_int(a + "ssm.time_step_rank").value_or(0);
    h.ssm_n_group = m.get_int(a + "ssm.group_count").value_or(0);
    h.full_attn_interval = m.get_int(a + "full_attention_interval").value_or(0);
    h.n_layer_nextn = m.get_int(a + "nextn_predict_layers").value_or(0);
    if (h.n_layer_nextn < 0 || h.n_layer_nextn >= h.n_layer)
        fail("{}: {}nextn_predict_layers = {} must be in [0, block_count = {})", m.source, a, h.n_layer_nextn, h.n_layer);
    if (m.find(a + "attention.recurrent_layers")) {
        const GgufArray* arr = m.get_array(a + "attention.recurrent_layers");
        if (!arr) fail("{}: metadata key '{}attention.recurrent_layers' must be an array", m.source, a);
        std::visit(
            [&](const auto& vec) {
                using E = typename std::decay_t<decltype(vec)>::value_type;
                if constexpr (std::is_integral_v<E>)
                    for (auto x : vec) h.recurrent_layers.push_back(x != 0);
                else fail("{}: metadata key '{}attention.recurrent_layers' is not an array of booleans or integers", m.source, a);
            },
            arr->data);
        if (static_cast<int64_t>(h.recurrent_layers.size()) < h.n_layer - h.n_layer_nextn)
            fail("{}: {}attention.recurrent_layers has {} entries but the model has {} layers", m.source, a,
                 h.recurrent_layers.size(), h.n_layer - h.n_layer_nextn);
    }
    h.n_layer_dense_lead = m.get_int(a + "leading_dense_block_count").value_or(0);
    h.expert_gating_func = m.get_int(a + "expert_gating_func").value_or(0);
    if (h.expert_gating_func < 0 || h.expert_gating_func > 3)
        fail("{}: {}expert_gating_func = {} is not a llama.cpp gating function (1 softmax, 2 sigmoid, 3 softmax_weight)", m.source,
             a, h.expert_gating_func);
    if (m.find(a + "expert_weights_norm")) {
        const auto b = m.get_bool(a + "expert_weights_norm");
        if (!b) fail("{}: metadata key '{}expert_weights_norm' must be a boolean", m.source, a);
        h.expert_weights_norm = *b;
    }
    h.expert_weights_scale = real("expert_weights_scale", 0, false);
    h.expert_group_count = m.get_int(a + "expert_group_count").value_or(0);
    h.expert_group_used_count = m.get_int(a + "expert_group_used_count").value_or(0);
    if (h.expert_group_count < 0 || h.expert_group_used_count < 0 ||
        (h.expert_group_count > 0 && (h.expert_group_used_count > h.expert_group_count || h.expert_group_used_count == 0)))
        fail("{}: {}expert_group_used_count = {} with expert_group_count = {} is inconsistent", m.source, a,
             h.expert_group_used_count, h.expert_group_count);
    if (h.n_layer_dense_lead < 0 || h.n_layer_dense_lead > h.n_layer - h.n_layer_nextn)
        fail("{}: {}leading_dense_block_count = {} must be in [0, {}]", m.source, a, h.n_layer_dense_lead, h.n_layer - h.n_layer_nextn);
    h.n_layer -= h.n_layer_nextn;  // MTP blocks follow the trunk; the forward pass does not run them
    if (m.find(a + "rope.dimension_sections")) {
        const GgufArray* arr = m.get_array(a + "rope.dimension_sections");
        if (!arr) fail("{}: metadata key '{}rope.dimension_sections' must be an array", m.source, a);
        std::visit(
            [&](const auto& vec) {
                using E = typename std::decay_t<decltype(vec)>::value_type;
                if constexpr (std::is_integral_v<E> && !std::is_same_v<E, bool>)
                    for (auto x : vec) h.rope_sections.push_back(static_cast<int32_t>(x));
                else fail("{}: metadata key '{}rope.dimension_sections' is not an array of integers", m.source, a);
            },
            arr->data);
    }
    // Bounds well above any real model (llama.cpp: LLAMA_MAX_LAYERS 512, experts up to 512) that
    // stop a corrupt header from driving huge allocations.
    if (h.n_layer > kMaxLayers) fail("{}: {}block_count = {} exceeds the maximum of {}", m.source, a, h.n_layer, kMaxLayers);
    if (h.n_expert > kMaxExperts) fail("{}: {}expert_count = {} exceeds the maximum of {}", m.source, a, h.n_expert, kMaxExperts);
    if (h.n_expert < 0 || h.n_expert_used < 0 || h.n_expert_used > h.n_expert)
        fail("{}: expert_used_count = {} with expert_count = {} is inconsistent", m.source, h.n_expert_used, h.n_expert);
    return h;
}

void write_hparams(GgufMetadata& m, const ModelHparams& hp) {
    const std::string a = hp.arch + ".";
    m.set("general.architecture", hp.arch);
    m.set("general.type", std::string("model"));
    m.set("general.name", hp.name);
    m.set(a + "block_count", static_cast<uint32_t>(hp.n_layer + hp.n_layer_nextn));
    m.set(a + "context_length", static_cast<uint32_t>(hp.n_ctx_train));
    m.set(a + "embedding_length", static_cast<uint32_t>(hp.n_embd));
    m.set(a + "feed_forward_length", static_cast<uint32_t>(hp.n_ff));
    m.set(a + "attention.head_count", static_cast<uint32_t>(hp.n_head));
    m.set(a + "attention.head_count_kv", static_cast<uint32_t>(hp.n_head_kv));
    m.set(a + "rope.freq_base", static_cast<float>(hp.rope_freq_base));
    m.set(a + "attention.layer_norm_rms_epsilon", static_cast<float>(hp.rms_eps));
    m.set(a + "expert_count", static_cast<uint32_t>(hp.n_expert));
    m.set(a + "expert_used_count", static_cast<uint32_t>(hp.n_expert_used));
    m.set(a + "attention.key_length", static_cast<uint32_t>(hp.head_dim));
    m.set(a + "attention.value_length", static_cast<uint32_t>(hp.head_dim_v));
    m.set(a + "expert_feed_forward_length", static_cast<uint32_t>(hp.n_ff_exp));
    if (hp.n_layer_dense_lead > 0) m.set(a + "leading_dense_block_count", static_cast<uint32_t>(hp.n_layer_dense_lead));
    if (hp.expert_gating_func > 0) m.set(a + "expert_gating_func", static_cast<uint32_t>(hp.expert_gating_func));
    if (hp.expert_weights_norm) m.set(a + "expert_weights_norm", true);
    if (hp.expert_weights_scale > 0) m.set(a + "expert_weights_scale", static_cast<float>(hp.expert_weights_scale));
    if (hp.expert_group_count > 0) {
        m.set(a + "expert_group_count", static_cast<uint32_t>(hp.expert_group_count));
        m.set(a + "expert_group_used_count", static_cast<uint32_t>(hp.expert_group_used_count));
    }
    if (hp.rope_scaling == "yarn") {
        m.set(a + "rope.scaling.type", hp.rope_scaling);
        m.set(a + "rope.scaling.factor", static_cast<float>(hp.rope_scaling_factor));
        m.set(a + "rope.scaling.original_context_length", static_cast<uint32_t>(hp.rope_orig_ctx));
    }
    if (hp.sliding_window > 0) m.set(a + "attention.sliding_window", static_cast<uint32_t>(hp.sliding_window));
    if (hp.rope_dim > 0 && hp.rope_dim != hp.head_dim) m.set(a + "rope.dimension_count", static_cast<uint32_t>(hp.rope_dim));
    if (hp.n_ff_shexp > 0) m.set(a + "expert_shared_feed_forward_length", static_cast<uint32_t>(hp.n_ff_shexp));
    if (hp.ssm_d_inner > 0) {  // as convert_hf_to_gguf.py's Qwen3NextModel writes them
        m.set(a + "ssm.conv_kernel", static_cast<uint32_t>(hp.ssm_d_conv));
        m.set(a + "ssm.state_size", static_cast<uint32_t>(hp.ssm_d_state));
        m.set(a + "ssm.group_count", static_cast<uint32_t>(hp.ssm_n_group));
        m.set(a + "ssm.time_step_rank", static_cast<uint32_t>(hp.ssm_dt_rank));
        m.set(a + "ssm.inner_size", static_cast<uint32_t>(hp.ssm_d_inner));
        m.set(a + "full_attention_interval", static_cast<uint32_t>(hp.full_attn_interval));
    }
    if (!hp.rope_sections.empty()) {  // as convert_hf_to_gguf.py's _Qwen35MRopeMixin writes it (INT32 array)
        auto arr = std::make_shared<GgufArray>();
        arr->type = GgufType::INT32;
        arr->data = hp.rope_sections;
        m.set(a + "rope.dimension_sections", arr);
    }
}

uint32_t llama_file_type_for(GgmlType t) {
    switch (t) {
        case GgmlType::F32: return 0;
        case GgmlType::F16: return 1;
        case GgmlType::Q4_0: return 2;
        case GgmlType::Q4_1: return 3;
        case GgmlType::Q8_0: return 7;
        case GgmlType::Q5_0: return 8;
        case GgmlType::Q5_1: return 9;
        case GgmlType::Q2_K: return 10;
        case GgmlType::Q3_K: return 12;
        case GgmlType::Q4_K: return 15;
        case GgmlType::Q5_K: return 17;
        case GgmlType::Q6_K: return 18;
        case GgmlType::IQ4_NL: return 25;
        case GgmlType::IQ4_XS: return 30;
        case GgmlType::BF16: return 32;
        case GgmlType::MXFP4: return 38;
        default: return 0;
    }
}

}  // namespace nitro
