// The KV cache: per layer and per sequence, keys and values of past positions in F16 (as
// llama.cpp's default cache type), so attention reads half the bytes of F32 and both engines round
// K/V alike.
//
// Full-attention layers hold n_ctx positions per sequence. Sliding-window layers hold a ring of
// window + n_ubatch - 1 positions per sequence: a prompt chunk of up to n_ubatch tokens of one
// sequence is written before its queries attend, and the oldest query of the chunk still needs
// `window` keys behind it (LayerSpec::kv_capacity, runtime/model_spec.h). Sequences never share
// entries: sequence s of layer il is its own [capacity, n_kv_dim] block.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace nitro {

struct ModelSpec;

class KvCache {
public:
    struct Layer {
        int64_t capacity = 0;           ///< positions held per sequence (ring size for SWA layers)
        std::vector<uint16_t> k, v;     ///< [n_seq, capacity, n_kv_dim] fp16
    };

    /// Per layer and sequence spec.layers[il].kv_capacity positions of spec.n_k() / spec.n_v()
    /// values, zeroed. n_seq >= 1 sequences.
    explicit KvCache(const ModelSpec& spec, int n_seq = 1);

    /// Slot of position `pos` in layer il (the same in every sequence).
    int64_t slot(int il, int64_t pos) const { return pos % layers_[static_cast<size_t>(il)].capacity; }
    /// Key [n_k] / value [n_v] of position `pos` of sequence `seq` in layer il.
    uint16_t* k(int il, int seq, int64_t pos) { return layer(il).k.data() + (seq * layer(il).capacity + slot(il, pos)) * n_k_; }
    uint16_t* v(int il, int seq, int64_t pos) { return layer(il).v.data() + (seq * layer(il).capacity + slot(il, pos)) * n_v_; }
    const uint16_t* k(int il, int seq, int64_t pos) const { return const_cast<KvCache*>(this)->k(il, seq, pos); }
    const uint16_t* v(int il, int seq, int64_t pos) const { return const_cast<KvCache*>(this)->v(il, seq, pos); }

    int64_t n_ctx() const { return n_ctx_; }
    int n_seq() const { return n_seq_; }
    /// Total bytes held (all sequences).
    uint64_t bytes() const;

private:
    Layer& layer(int il) { return layers_[static_cast<size_t>(il)]; }
    int64_t n_ctx_, n_k_, n_v_;
    int n_seq_;
    std::vector<Layer> layers_;
};

}  // namespace nitro
