// The KV cache: per layer, keys and values of past positions in F16 (as llama.cpp's default
// cache type), so attention reads half the bytes of F32 and both engines round K/V alike.
//
// Full-attention layers hold n_ctx positions. Sliding-window layers hold a ring of
// window + n_ubatch - 1 positions: a prompt chunk of up to n_ubatch tokens is written before its
// queries attend, and the oldest query of the chunk still needs `window` keys behind it
// (LayerSpec::kv_capacity, runtime/model_spec.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace nitro {

struct ModelSpec;

class KvCache {
public:
    struct Layer {
        int64_t capacity = 0;           ///< positions held (ring size for SWA layers)
        std::vector<uint16_t> k, v;     ///< [capacity, n_kv_dim] fp16
    };

    /// Per layer spec.layers[il].kv_capacity positions of spec.n_k() / spec.n_v() values, zeroed.
    explicit KvCache(const ModelSpec& spec);

    /// Slot of position `pos` in layer il.
    int64_t slot(int il, int64_t pos) const { return pos % layers_[static_cast<size_t>(il)].capacity; }
    uint16_t* k(int il, int64_t pos) { return layers_[static_cast<size_t>(il)].k.data() + slot(il, pos) * n_k_; }
    uint16_t* v(int il, int64_t pos) { return layers_[static_cast<size_t>(il)].v.data() + slot(il, pos) * n_v_; }
    const uint16_t* k(int il, int64_t pos) const { return const_cast<KvCache*>(this)->k(il, pos); }
    const uint16_t* v(int il, int64_t pos) const { return const_cast<KvCache*>(this)->v(il, pos); }

    int64_t n_ctx() const { return n_ctx_; }
    /// Total bytes held.
    uint64_t bytes() const;

private:
    int64_t n_ctx_, n_k_, n_v_;
    std::vector<Layer> layers_;
};

}  // namespace nitro
