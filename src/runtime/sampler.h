// Token sampling: greedy, temperature, top-k, top-p (nucleus), min-p, seeded and reproducible.
// Order as llama.cpp's default chain: top-k -> top-p -> min-p -> temperature -> draw.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace nitro {

struct SamplerParams {
    float temperature = 0.0f;  ///< <= 0: greedy (argmax)
    int top_k = 40;            ///< <= 0: disabled
    float top_p = 1.0f;        ///< >= 1: disabled
    float min_p = 0.0f;        ///< <= 0: disabled
    uint64_t seed = 0;
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
    int32_t sample(std::span<const float> logits);

private:
    SamplerParams p_;
    std::mt19937_64 rng_;
    std::vector<TokenProb> cand_;
};

/// Index of the largest logit (ties: lowest id).
int32_t argmax(std::span<const float> logits);
/// The k most probable tokens under softmax(logits) at temperature 1, most probable first.
std::vector<TokenProb> top_probs(std::span<const float> logits, int k);

}  // namespace nitro
