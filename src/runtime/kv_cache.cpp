#include "runtime/kv_cache.h"

#include <algorithm>

namespace nitro {

KvCache::KvCache(int64_t n_ctx, int64_t n_ubatch, int64_t n_kv_dim_k, int64_t n_kv_dim_v,
                 const std::vector<int64_t>& window_per_layer)
    : n_ctx_(n_ctx), n_k_(n_kv_dim_k), n_v_(n_kv_dim_v) {
    layers_.resize(window_per_layer.size());
    for (size_t il = 0; il < layers_.size(); ++il) {
        const int64_t w = window_per_layer[il];
        auto& L = layers_[il];
        L.capacity = w > 0 ? std::min(n_ctx, w + n_ubatch - 1) : n_ctx;
        L.k.assign(static_cast<size_t>(L.capacity * n_k_), 0);
        L.v.assign(static_cast<size_t>(L.capacity * n_v_), 0);
    }
}

uint64_t KvCache::bytes() const {
    uint64_t b = 0;
    for (const auto& L : layers_) b += (L.k.size() + L.v.size()) * sizeof(uint16_t);
    return b;
}

}  // namespace nitro
