// A decoding session on the CPU: n_seq sequences (each with its own position and K/V), the KV
// cache, and the forward pass. eval/n_past/truncate work on sequence 0; eval_batch runs rows of
// several sequences in one forward chunk (continuous batching in the server): every op but
// attention is row-wise, so each row gets the logits it would get evaluated alone, bit for bit.
//
// The forward pass is layer-major over a chunk of up to n_ubatch tokens (prefill) or one token
// (decode). Per layer (llama.cpp llm_build_openai_moe_iswa / llm_build_qwen3moe):
//   h = rms_norm(x) ; q,k,v = h W (+ b) ; [q,k = rms_norm per head] ; rope(q, k) ;
//   x += attention(q, K/V cache) W_o (+ b_o) ;
//   h = rms_norm(x) ; router -> top-k experts and weights ; x += sum_j w_j * expert_j(h).
// Finally logits = rms_norm(x) W_out.
#pragma once

#include "cpu/matmul.h"
#include "cpu/moe.h"
#include "cpu/ops.h"
#include "runtime/forward.h"
#include "runtime/kv_cache.h"
#include "runtime/model.h"
#include "runtime/model_spec.h"
#include "runtime/recurrent_state.h"
#include "runtime/sequence_engine.h"

#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace nitro {

class RouteReplay;

/// Parts of the forward pass timed by Session (wall-clock seconds, summed over layers and calls).
enum class Phase : int {
    Embed,         ///< token_embd rows, RoPE tables
    AttnProj,      ///< attn_norm, q/k/v projections (+ bias, q/k norm, RoPE, K/V cache append)
    Attention,     ///< scores, softmax and V sum over the KV cache
    AttnOut,       ///< attn_output projection and residual
    SsmProj,       ///< Gated DeltaNet: attn_norm, q/k/v, z, beta/alpha projections, decay and beta
    DeltaNet,      ///< Gated DeltaNet: causal conv1d, q/k l2 norm, the gated delta rule
    SsmOut,        ///< Gated DeltaNet: gated RMSNorm, ssm_out projection and residual
    Router,        ///< ffn_norm, ffn_gate_inp, top-k and expert weights
    ExpertGateUp,  ///< ffn_gate_exps and ffn_up_exps products (MUL_MAT_ID), grouping
    ExpertDown,    ///< activation, ffn_down_exps products
    MoeSum,        ///< weighted sum of the experts' outputs and residual
    SharedExpert,  ///< the shared expert (gate/up/down) and its sigmoid gate
    DenseFfn,      ///< the FFN of a layer without routed experts (gate/up/down)
    LmHead,        ///< output_norm and the output (LM head) product
    Count
};
/// Name of a phase as `nitro bench` prints it, e.g. "expert gate/up".
const char* phase_name(Phase p);
using PhaseTimes = std::array<double, static_cast<size_t>(Phase::Count)>;

class Session final : public SequenceEngine {
public:
    /// Throws nitro::Error if n_ctx, n_ubatch or n_seq is not positive.
    Session(const Model& model, const SessionOptions& opt);
    ~Session() override;

    std::string describe() const override;
    const Model& model() const { return model_; }
    cpu::ThreadPool& pool() { return *pool_; }
    const KvCache& kv_cache() const { return *kv_; }
    uint64_t kv_host_bytes() const override { return kv_->bytes(); }
    /// Bytes of the recurrent state of all sequences plus their snapshots (0 without DeltaNet layers).
    uint64_t recurrent_bytes() const;

    /// Seconds spent in each phase since construction or the last reset_phase_times() (a few
    /// clock reads per layer; always on).
    const PhaseTimes& phase_times() const { return phase_s_; }
    void reset_phase_times() { phase_s_.fill(0.0); }
    /// Routed-expert work since construction (MoeWork).
    const MoeWork* moe_work() const override { return &moe_work_; }

protected:
    // The executor of the SequenceEngine: one forward chunk, and the recurrent state.
    void exec_chunk(const ChunkArgs& c, float* out) override;
    void state_reset(int seq) override;
    void state_save(int seq, std::vector<float>& out) override;
    void state_restore(int seq, const std::vector<float>& in) override;

private:
    struct Scratch;
    template <class B>
    friend void forward_chunk(B& b, const ModelSpec& spec, const ChunkArgs& c);
    template <class B>
    friend void forward_layer(B& b, const ModelSpec& spec, int il, const ChunkArgs& c);
    // The ops of forward_chunk (runtime/forward.h), on the CPU.
    void embed(const ChunkArgs& c);
    void attn_norm(int il, const ChunkArgs& c);
    void qkv(int il, const ChunkArgs& c);
    void rope_kv_store(int il, const ChunkArgs& c);
    void attention(int il, const ChunkArgs& c);
    void attn_out(int il, const ChunkArgs& c);
    void ffn_norm(int il, const ChunkArgs& c);
    void route(int il, const ChunkArgs& c);
    void moe(int il, const ChunkArgs& c);
    void lm_head(const ChunkArgs& c);
    void ssm_in(int il, const ChunkArgs& c);
    void ssm_conv(int il, const ChunkArgs& c);
    void delta_net(int il, const ChunkArgs& c);
    void ssm_out(int il, const ChunkArgs& c);
    void shared_expert(int il, const ChunkArgs& c);
    void ffn_dense(int il, const ChunkArgs& c);
    /// out = down(silu(h gate) * h up) for the chunk's n rows of h (F: the FFN width); the shared
    /// expert's and a dense layer's FFN.
    void swiglu_ffn(const GgufTensorInfo* gate, const GgufTensorInfo* up, const GgufTensorInfo* down, int64_t n, int64_t F,
                    float* out);
    /// h = rms_norm(x) * w for the chunk's n rows.
    void norm_rows(const GgufTensorInfo* w, int64_t n);
    /// One weight and its output [n, w rows] for project().
    struct Proj {
        const GgufTensorInfo* w;
        float* out;
    };
    /// out = x W^T for every projection, x [n, ne0]; x is converted once per weight type and all
    /// products run in one parallel region.
    void project(const float* x, int64_t n, int64_t ne0, std::span<const Proj> ps);
    /// Adds the time since the previous mark to phase p.
    void mark(Phase p);

    const Model& model_;
    std::unique_ptr<cpu::ThreadPool> pool_;
    std::unique_ptr<KvCache> kv_;
    std::unique_ptr<RecurrentState> rs_;       ///< DeltaNet layers' state (empty without them)
    /// Rows of the chunk grouped by sequence (ChunkArgs::groups as the recurrent ops take them):
    /// group g is sequence group_seq_[g] with rows group_rows_[group_off_[g] .. group_off_[g + 1]).
    std::vector<int32_t> group_seq_;
    std::vector<int64_t> group_off_, group_rows_;
    std::unique_ptr<Scratch> s_;
    std::vector<cpu::ExpertWeights> experts_;  ///< per layer
    float* logits_out_ = nullptr;              ///< where lm_head writes the chunk's logits
    PhaseTimes phase_s_{};
    MoeWork moe_work_;
    std::chrono::steady_clock::time_point phase_t_;
};

}  // namespace nitro
