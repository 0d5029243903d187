// Token sampling: greedy, temperature, top-k, top-p (nucleus), min-p, seeded and reproducible.
// Order as llama.cpp's default chain: logit bias -> top-k -> top-p -> min-p -> temperature -> draw.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

namespace nitro {

struct SamplerParams {
    float temperature = 0.0f;  ///< <= 0: greedy (argmax)
    int top_k = 40;            ///< <= 0: disabled
    float top_p = 1.0f;        ///< >= 1: disabled
    float min_p = 0.0f;        ///< <= 0: disabled
    uint64_t seed = 0;
    /// Added to a token's logit before anything else (OpenAI's and llama.cpp's logit_bias): (token, bias).
    std::vector<std::pair<int32_t, float>> logit_bias;
};

/// A token and its probability.
struct TokenProb {
    int32_t id;
    float p;
};

class Sampler {
public:
    explicit Sampler(const SamplerParams& p);
    /// Picks the next token from logits [n_vocab]. Same seed and logits: same choices.
    /// `allowed` (grammar-constrained sampling, TokenConstraint): a bitset [ceil(n_vocab / 64)]
    /// of the tokens that may be drawn; the others are removed before any other step (as if their
    /// logit were -inf), so top-k, top-p, min-p and temperature apply to the allowed tokens.
    /// Returns -1 when `allowed` allows none.
    int32_t sample(std::span<const float> logits, const std::vector<uint64_t>* allowed = nullptr);

private:
    SamplerParams p_;
    std::mt19937_64 rng_;
    std::vector<TokenProb> cand_;
    std::vector<float> biased_;  ///< the logits with logit_bias added
};

/// Index of the largest logit (ties: lowest id).
int32_t argmax(std::span<const float> logits);
/// Index of the largest logit among the tokens set in `allowed` (a bitset as in Sampler::sample;
/// ties: lowest id), or -1 when none is.
int32_t argmax_allowed(std::span<const float> logits, const std::vector<uint64_t>& allowed);
/// The k most probable tokens under softmax(logits) at temperature 1, most probable first.
std::vector<TokenProb> top_probs(std::span<const float> logits, int k);

}  // namespace nitro
