// Tensor-core flash attention for prompt chunks (many queries at once): the path attention()
// (ops.h) takes for n_q >= kFlashMinQueries at head_dim 64 and 128. Same arguments, same output
// layout and the same mathematics as the per-query kernel (causal by absolute position, sliding
// window, sinks, GQA, the ring cache), computed with f16 x f16 -> f32 tensor-core products.
#pragma once

#include "cuda/ops.h"

namespace nitro::cuda {

/// attention() takes the flash kernel from this many queries (and n_split == 1, a.flash).
inline constexpr int64_t kFlashMinQueries = 64;
/// Keys per tile of the flash kernel: a flash-decoding split holds a whole number of them, and the
/// combine kernel counts the active splits with that rounding.
inline constexpr int kFlashTileKeys = 64;

/// True when flash_attention handles a's shape (head_dim 64 or 128; any GQA group size).
bool flash_attention_supported(const AttnArgs& a);

/// out [n_q, n_head * head_dim] f32 = softmax(scale * Q K^T (+ sink)) V over keys
/// max(0, p - window + 1) .. p of query i at position p = *pos0 + i (window 0: 0 .. p), keys read
/// from the F16 ring cache at slot key % capacity. Q is rounded to f16 (as the per-query kernel
/// rounds it); the probabilities are rounded to f16 for the PV product (relative error <= 2^-11
/// per term), everything else is f32. The cache must hold every key position the chunk reads
/// (capacity >= window + n_q - 1 for a window, > the last position otherwise), as for the
/// per-query kernel. a.n_split > 1 (flash-decoding; one query only, else an error): each split's
/// unnormalised result goes to a.partial (attention_partial_floats) instead of a.out, for the
/// combine of attention() (which is what calls it that way: AttnArgs::flash_decode).
void flash_attention(cudaStream_t s, const AttnArgs& a);

}  // namespace nitro::cuda
