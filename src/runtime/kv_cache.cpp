#include "runtime/kv_cache.h"

#include "core/error.h"
#include "runtime/model_spec.h"

namespace nitro {

KvCache::KvCache(const ModelSpec& spec, int n_seq) : n_ctx_(spec.n_ctx), n_k_(spec.n_k()), n_v_(spec.n_v()), n_seq_(n_seq) {
    if (n_seq < 1) fail("the K/V cache needs at least one sequence (got {})", n_seq);
    layers_.resize(spec.layers.size());
    for (size_t il = 0; il < layers_.size(); ++il) {
        auto& L = layers_[il];
        L.capacity = spec.layers[il].kv_capacity;
        L.k.assign(static_cast<size_t>(n_seq * L.capacity * n_k_), 0);
        L.v.assign(static_cast<size_t>(n_seq * L.capacity * n_v_), 0);
    }
}

uint64_t KvCache::bytes() const {
    uint64_t b = 0;
    for (const auto& L : layers_) b += (L.k.size() + L.v.size()) * sizeof(uint16_t);
    return b;
}

}  // namespace nitro
