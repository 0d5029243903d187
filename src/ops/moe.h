// Parameters of the MoE step shared by the CPU (cpu/moe.h) and CUDA (cuda/ops.h) kernels and the
// architecture descriptions (arch/) that choose them.
#pragma once

#include <cstdint>

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

/// The two gatings the kernels of this build implement, as they name them.
enum class MoeGating {
    SoftmaxAll,       ///< softmax over all experts, top-k, then renormalise the k weights (qwen3moe)
    SoftmaxSelected,  ///< top-k on the logits, softmax over the k selected logits (gpt-oss)
};

/// Activation of the expert FFN.
enum class FfnAct {
    Swiglu,     ///< silu(gate) * up
    SwigluOai,  ///< gpt-oss: clamped, alpha 1.702, limit 7.0, (up + 1)
};

}  // namespace nitro
