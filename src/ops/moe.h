// Parameters of the MoE step shared by the CPU (cpu/moe.h) and CUDA (cuda/ops.h) kernels and the
// architecture descriptions (arch/) that choose them.
#pragma once

#include <cstdint>
#include <string>

namespace nitro {

/// How a MoE router turns its logits into the selected experts and their weights, as data
/// (llama.cpp build_moe_ffn: gating_op, exp_probs_b, n_group / n_group_used, norm_w, w_scale):
///   scores   = softmax(logits) over all experts, or sigmoid(logits);
///   selection: the top k of scores + score_bias (the bias only chooses, it is not in the weights);
///     with n_group > 1 only experts of the best topk_group groups compete, a group scoring the sum
///     of its two best (biased) scores;
///   weights  = the selected scores (weights_from_logits: softmax over the k selected logits
///     instead), divided by their sum when norm_weights, times weights_scale.
/// gpt-oss: softmax over the selected logits. qwen3moe / qwen3next: softmax over all, normalised.
/// DeepSeek-V3, Kimi-K2: sigmoid, score bias, groups, normalised, scaled. GLM-4.5: sigmoid, score
/// bias, normalised, scaled.
struct GatingSpec {
    enum class Score : uint8_t { Softmax, Sigmoid };
    Score score = Score::Softmax;
    bool weights_from_logits = false;  ///< softmax over the k selected logits (gpt-oss; scores unused)
    bool score_bias = false;           ///< ffn_exp_probs_b is added to the scores for the selection
    int n_group = 1;                   ///< expert groups (DeepSeek-V3: 8)
    int topk_group = 1;                ///< groups the selection may take experts from (DeepSeek-V3: 4)
    bool norm_weights = false;         ///< divide the k weights by their sum
    float weights_scale = 1.0f;        ///< expert_weights_scale (routed_scaling_factor)

    /// gpt-oss: top-k on the logits, softmax over the k.
    static GatingSpec softmax_selected() {
        GatingSpec g;
        g.weights_from_logits = true;
        return g;
    }
    /// qwen3moe: softmax over all experts, top-k, renormalised.
    static GatingSpec softmax_all_normalized() {
        GatingSpec g;
        g.norm_weights = true;
        return g;
    }
};

/// One router call, the same struct for cpu::route and cuda::route / cuda::router_top_k (llama.cpp
/// build_moe_ffn): logits [n, n_expert] (+ logit_bias) -> scores (gating.score) -> the top k of
/// scores + score_bias (within the best topk_group groups when n_group > 1), ties to the lower id ->
/// ids [n, k] and weights [n, k] in selection order (the unbiased scores of the selected experts,
/// or the softmax over their logits; normalised; scaled) and margin [n] (may be null): how far the
/// last selected expert is ahead of the best one left out, in logit units (nats) for softmax
/// gatings without a score bias or groups, else in units of the biased scores. Experts of groups
/// left out do not count as left out for the margin.
struct RouteArgs {
    float* logits = nullptr;            ///< [n, n_expert]; cpu::route uses them as scratch, router_top_k writes them
    const float* logit_bias = nullptr;  ///< [n_expert] ffn_gate_inp.bias, added to the logits (gpt-oss); may be null
    const float* score_bias = nullptr;  ///< [n_expert] ffn_exp_probs_b (gating.score_bias): added to the scores to select
    int64_t n = 0;                      ///< tokens
    int64_t n_expert = 0;
    int k = 0;                          ///< n_expert_used
    GatingSpec gating;
    int32_t* ids = nullptr;             ///< [n, k]
    float* weights = nullptr;           ///< [n, k]
    float* margin = nullptr;            ///< [n], or null
};

/// llama.cpp clamps the sum of the selected weights from below before normalising by it.
inline constexpr float kMinWeightsSum = 6.103515625e-5f;
/// Expert groups a router kernel handles (a lane each in the CUDA router's warp).
inline constexpr int kMaxExpertGroups = 32;

/// Why a router of n_expert experts with k used cannot run `g` (empty: it can): groups that do not
/// divide the experts, fewer than 2 experts a group (a group scores the sum of its best two), too
/// few experts in the kept groups for k.
inline std::string gating_problem(const GatingSpec& g, int64_t n_expert, int k) {
    if (g.weights_from_logits && (g.score != GatingSpec::Score::Softmax || g.score_bias || g.n_group > 1))
        return "weights from the logits (softmax over the selected) go with plain softmax selection only";
    if (g.n_group < 1 || g.topk_group < 1 || g.topk_group > g.n_group) return "expert_group_used_count must be in [1, expert_group_count]";
    if (g.n_group > 1) {
        if (g.n_group > kMaxExpertGroups) return "at most 32 expert groups are supported";
        if (n_expert % g.n_group != 0) return "expert_group_count must divide expert_count";
        if (n_expert / g.n_group < 2) return "every expert group needs at least 2 experts (a group scores its best two)";
        if (static_cast<int64_t>(g.topk_group) * (n_expert / g.n_group) < k)
            return "the kept expert groups hold fewer experts than expert_used_count";
    }
    if (!(g.weights_scale > 0.0f)) return "expert_weights_scale must be > 0";
    return {};
}

/// Activation of the expert FFN.
enum class FfnAct {
    Swiglu,     ///< silu(gate) * up
    SwigluOai,  ///< gpt-oss: clamped, alpha 1.702, limit 7.0, (up + 1)
};

}  // namespace nitro
