// The forward pass, written once. Every executor walks this loop: the CPU Session
// (runtime/session.cpp), the CUDA GpuSession (gpu/gpu_session.cpp) in GPU-all and hybrid
// placement. An executor supplies the ops (`B`) with these names; what differs between placements
// is inside the ops (which device runs them, which experts are resident), never the order.
//
// Per layer (llama.cpp src/models/openai-moe-iswa.cpp, src/models/qwen3moe.cpp,
// src/models/qwen3next.cpp, src/models/glm4-moe.cpp):
//   h = rms_norm(x) * attn_norm
//   attention layer:
//     q, k, v = h W_q, h W_k, h W_v (+ biases)       [gated: W_q gives q and an output gate g per head]
//     [q, k = rms_norm per head]; RoPE(q, k) (partial: the first n_rot dims); append k, v to the K/V cache (F16)
//     attn = softmax(q K^T / sqrt(head_dim) [+ sink logits], causal [, sliding window]) V
//     x += (attn [* sigmoid(g)]) W_o (+ b_o)
//   Gated DeltaNet layer (linear attention with a recurrent state per sequence):
//     q|k|v = h W_qkv, z = h W_gate, beta = sigmoid(h W_b), decay = exp(softplus(h W_a + dt_bias) * A)
//     q|k|v = silu(causal_conv1d(conv state | q|k|v)); q, k = l2_norm per head
//     o = gated delta rule over the chunk (state S per value head: S = decay S + k (beta (v - S^T k))^T, o = S^T q / sqrt(d))
//     x += (rms_norm(o) * ssm_norm * silu(z)) W_out
//   h = rms_norm(x) * ffn_norm
//   dense FFN layer (DeepSeek's and GLM's leading layers): x += W_down(silu(h W_gate) * h W_up); else
//   ids, weights = top-k of the router (h W_router + b)
//   [x += sigmoid(h . w_shexp_gate) * shared_expert(h)]
//   x += sum_j weights_j * expert_{ids_j}(h)        (resident experts + a partial sum from elsewhere)
// then logits = rms_norm(x) * output_norm W_output.
#pragma once

#include "runtime/model_spec.h"

#include <cstdint>
#include <span>

namespace nitro {

/// The rows of one sequence inside a chunk: rows [off, off + n) of the chunk are positions
/// pos0 .. pos0 + n - 1 of sequence `seq`.
struct SeqGroup {
    int seq = 0;
    int64_t off = 0, n = 0, pos0 = 0;
};

/// One forward chunk of n rows, as the engine (runtime/sequence_engine.h) hands it to an executor:
/// the rows grouped by sequence (groups, in the order the sequences first appear in the batch;
/// each sequence's rows in order). Row i is at position pos[i] of sequence seq[i]; attention and
/// the recurrent ops read only the row's own sequence, every other op is row-wise. logits: none,
/// the last row's, every row's, or the rows listed in logit_rows (in the order they are written:
/// the batch's order).
struct ChunkArgs {
    int64_t n = 0;
    int64_t pos0 = 0;                     ///< position of row 0
    enum class Logits { None, Last, All, Rows } logits = Logits::Last;
    std::span<const int32_t> tokens;      ///< [n] token ids
    std::span<const int32_t> seq;         ///< [n] sequence of each row, or empty (all sequence 0)
    std::span<const int64_t> pos;         ///< [n] position of each row in its sequence, or empty (pos0 + i)
    std::span<const uint8_t> prefill;     ///< [n] the row's sequence has several rows in the chunk (route events, traces)
    std::span<const SeqGroup> groups;     ///< the rows of each sequence (empty: one sequence, sequence 0)
    std::span<const int64_t> logit_rows;  ///< Logits::Rows: the rows whose logits are computed

    int64_t pos_of(int64_t i) const { return pos.empty() ? pos0 + i : pos[static_cast<size_t>(i)]; }
    int seq_of(int64_t i) const { return seq.empty() ? 0 : seq[static_cast<size_t>(i)]; }
    bool prefill_of(int64_t i) const { return prefill.empty() ? n > 1 : prefill[static_cast<size_t>(i)] != 0; }
};

/// One layer of the forward pass for one chunk through executor `b`.
template <class B>
void forward_layer(B& b, const ModelSpec& spec, int il, const ChunkArgs& c) {
    b.attn_norm(il, c);                // h = rms_norm(x) * attn_norm
    if (spec.layers[static_cast<size_t>(il)].kind == LayerKind::DeltaNet) {
        b.ssm_in(il, c);               // q|k|v, z, beta, decay = projections of h
        b.ssm_conv(il, c);             // causal conv1d over the conv state and the chunk, silu; conv state update
        b.delta_net(il, c);            // l2-norm q, k; gated delta rule over the chunk; state update
        b.ssm_out(il, c);              // x += (rms_norm(o) * ssm_norm * silu(z)) W_out
    } else {
        b.qkv(il, c);                  // q, k, v = h W (+ b) [q and its output gate]
        b.rope_kv_store(il, c);        // [q/k norm], RoPE, K/V cache append
        b.attention(il, c);            // attn = softmax(q K^T * scale [+ sinks], window) V
        b.attn_out(il, c);             // x += (attn [* sigmoid(gate)]) W_o (+ b_o)
    }
    b.ffn_norm(il, c);                 // h = rms_norm(x) * ffn_norm
    if (spec.layers[static_cast<size_t>(il)].ffn == FfnKind::Dense) {
        b.ffn_dense(il, c);            // x += ffn_down(silu(h ffn_gate) * h ffn_up)
        return;
    }
    b.route(il, c);                    // router: expert ids and weights per token (+ route events)
    // The shared expert before the routed ones: a hybrid GPU computes it while the CPU works on
    // the non-resident experts (the router's result has gone to the CPU already).
    if (spec.shared_expert) b.shared_expert(il, c);  // x += sigmoid(h . g) * ffn_shexp(h)
    b.moe(il, c);                      // x += sum_j w_j expert_j(h), resident here + partial from elsewhere
}

/// Runs the forward pass of one chunk through executor `b`.
template <class B>
void forward_chunk(B& b, const ModelSpec& spec, const ChunkArgs& c) {
    b.embed(c);                        // x = token_embd[ids]; RoPE tables for the positions
    for (int il = 0; il < static_cast<int>(spec.n_layer); ++il) forward_layer(b, spec, il, c);
    if (c.logits != ChunkArgs::Logits::None) b.lm_head(c);  // logits = rms_norm(x) W_out
}

/// Runs the forward pass of consecutive chunks ("blocks") of one sequence layer-major: each layer
/// runs every block, in order, before the next layer starts (docs/hybrid.md "Layer-major groups").
/// Each block reads the K/V and recurrent state its predecessors wrote in the same layer, so the
/// result is the same as forward_chunk on each block in turn. b.select_block(i) points the ops at
/// block i's rows; an executor may leave a layer's routed experts to the moe call of its last block
/// and compute them for all blocks at once there (the hybrid GPU: a staged expert crosses PCIe once
/// per layer instead of once per block).
template <class B>
void forward_blocks(B& b, const ModelSpec& spec, std::span<const ChunkArgs> blocks) {
    for (size_t i = 0; i < blocks.size(); ++i) {
        b.select_block(i);
        b.embed(blocks[i]);
    }
    for (int il = 0; il < static_cast<int>(spec.n_layer); ++il)
        for (size_t i = 0; i < blocks.size(); ++i) {
            b.select_block(i);
            forward_layer(b, spec, il, blocks[i]);
        }
    for (size_t i = 0; i < blocks.size(); ++i) {
        b.select_block(i);
        if (blocks[i].logits != ChunkArgs::Logits::None) b.lm_head(blocks[i]);
    }
}

}  // namespace nitro
