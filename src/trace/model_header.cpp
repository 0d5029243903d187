#include "trace/model_header.h"

#include "arch/summary.h"
#include "core/error.h"

#include <xxhash.h>

#include <filesystem>
#include <memory>

namespace nitro {

uint64_t model_file_hash(const GgufModel& model) {
    std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> st(XXH3_createState(), &XXH3_freeState);
    NITRO_CHECK(st && XXH3_64bits_reset(st.get()) == XXH_OK);
    for (const auto& shard : model.shards())
        NITRO_CHECK(XXH3_64bits_update(st.get(), shard->mapping(), shard->file_size()) == XXH_OK);
    return XXH3_64bits_digest(st.get());
}

TraceHeader trace_header_from_model(const GgufModel& model, bool has_weights) {
    const ModelSummary s = summarize_model(model);
    if (!s.hparams_error.empty()) fail("{}: not a model nitro can trace: {}", model.path(), s.hparams_error);
    if (s.hp.n_expert < 1 || s.hp.n_expert_used < 1)
        fail("{}: not a Mixture-of-Experts model ({}.expert_count / expert_used_count are missing)", model.path(),
             s.hp.arch);
    TraceHeader h;
    h.model_name = s.hp.name.empty() ? std::filesystem::path(model.path()).filename().string() : s.hp.name;
    h.model_hash = model_file_hash(model);
    h.n_layer = static_cast<uint32_t>(s.hp.n_layer);
    h.n_expert = static_cast<uint32_t>(s.hp.n_expert);
    h.n_expert_used = static_cast<uint32_t>(s.hp.n_expert_used);
    h.has_weights = has_weights;
    h.bytes_per_expert_per_layer.assign(h.n_layer, 0);
    for (size_t l = 0; l < s.bytes_per_expert_per_layer.size() && l < h.n_layer; ++l)
        h.bytes_per_expert_per_layer[l] = s.bytes_per_expert_per_layer[l];
    // Which layers have routed experts: the architecture's layer plan (a file of an architecture
    // this build does not know: every layer, as version 1 traces say).
    if (const ArchInfo* arch = find_arch(s.hp.arch)) {
        const ArchConfig cfg = arch->config(s.hp);
        for (const LayerShape& l : cfg.layers) h.layer_n_expert.push_back(l.ffn == FfnKind::Moe ? h.n_expert : 0);
    }
    h.validate(model.path());
    return h;
}

bool check_trace_matches_model(const TraceHeader& t, const TraceHeader& m) {
    if (t.n_layer != m.n_layer || t.n_expert != m.n_expert || t.n_expert_used != m.n_expert_used)
        fail("trace shape (n_layer {}, n_expert {}, n_expert_used {}) does not match model '{}' (n_layer {}, "
             "n_expert {}, n_expert_used {})",
             t.n_layer, t.n_expert, t.n_expert_used, m.model_name, m.n_layer, m.n_expert, m.n_expert_used);
    return !(t.model_hash != 0 && m.model_hash != 0 && t.model_hash != m.model_hash);
}

}  // namespace nitro
