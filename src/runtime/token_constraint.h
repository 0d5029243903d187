// A constraint on what a generation may produce next (grammar-constrained sampling): before each
// sampling step it says which tokens are allowed, after it it takes the token chosen. The sampler
// draws from the allowed tokens only (Sampler::sample with a mask); the server's response_format
// is one (src/grammar/response_constraint.h).
#pragma once

#include <cstdint>
#include <vector>

namespace nitro {

class TokenConstraint {
public:
    virtual ~TokenConstraint() = default;
    /// Sets `allowed` to the tokens that may come next: [ceil(n_vocab / 64)] words, bit (i % 64)
    /// of word i / 64 for token i. All zero means nothing can follow (the caller ends the
    /// generation with an error).
    virtual void allowed_tokens(std::vector<uint64_t>& allowed) = 0;
    /// Advances past token `id`. Throws nitro::Error if `id` was not allowed.
    virtual void accept(int32_t id) = 0;
};

}  // namespace nitro
