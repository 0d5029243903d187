// Parameters of the MoE step shared by the CPU (cpu/moe.h) and CUDA (cuda/ops.h) kernels and the
// architecture descriptions (arch/) that choose them.
#pragma once

namespace nitro {

/// How a MoE router turns logits into expert weights (llama.cpp llm_expert_gating_func_type).
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
