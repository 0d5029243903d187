// RoPE at long positions against a float64 reference of transformers' formulas
// (modeling_rope_utils.py: _compute_default_rope_parameters, _compute_yarn_parameters): gpt-oss's
// YaRN (factor 32 from 4,096, truncate false) up to its 131,072 positions, Qwen3's and
// Qwen3-Next's plain RoPE at 262,144. The engine computes the angles in float32 as ggml does; the
// bound per rotated pair is the float32 error of its angle, (2i + 8) roundings of 2^-24 of the
// angle (i repeated products by theta_scale, whose own rounding is amplified i times, then the
// interpolation and the mix), plus the rounding of cos / sin and of the magnitude scale.
#include "arch/synth.h"
#include "cpu/ops.h"
#include "runtime/placement.h"
#include "runtime/session.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace nitro {
namespace {

struct RefRope {
    int n_rot = 0;
    double base = 10000, factor = 1;
    int orig_ctx = 0;
    double beta_fast = 32, beta_slow = 1;
    bool yarn = false, truncate = true;
};

/// transformers' inverse frequencies (float64) for pair i, and the YaRN attention factor.
std::vector<double> ref_inv_freq(const RefRope& r, double* attention_factor) {
    const int half = r.n_rot / 2;
    std::vector<double> inv(static_cast<size_t>(half));
    *attention_factor = r.yarn ? 0.1 * std::log(r.factor) + 1.0 : 1.0;
    double low = 0, high = 0;
    if (r.yarn) {
        const double pi = 3.14159265358979323846;
        auto dim = [&](double turns) { return r.n_rot * std::log(r.orig_ctx / (turns * 2 * pi)) / (2 * std::log(r.base)); };
        low = dim(r.beta_fast);
        high = dim(r.beta_slow);
        if (r.truncate) {
            low = std::floor(low);
            high = std::ceil(high);
        }
        low = std::max(low, 0.0);
        high = std::min(high, r.n_rot - 1.0);
        if (low == high) high += 0.001;
    }
    for (int i = 0; i < half; ++i) {
        const double pos_freq = std::pow(r.base, 2.0 * i / r.n_rot);
        if (!r.yarn) {
            inv[static_cast<size_t>(i)] = 1.0 / pos_freq;
            continue;
        }
        const double extrap = 1.0 / pos_freq, interp = 1.0 / (r.factor * pos_freq);
        const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
        const double extrap_factor = 1.0 - ramp;
        inv[static_cast<size_t>(i)] = interp * (1.0 - extrap_factor) + extrap * extrap_factor;
    }
    return inv;
}

/// Checks the engine's rope_cache for `rope` at each position against the reference.
void expect_rope_matches(const RopeParams& rope, const RefRope& ref, std::initializer_list<int64_t> positions) {
    double af = 0;
    const std::vector<double> inv = ref_inv_freq(ref, &af);
    ASSERT_EQ(rope.n_rot, ref.n_rot);
    std::vector<float> cache(static_cast<size_t>(rope.n_rot));
    for (int64_t pos : positions) {
        cpu::rope_cache(rope, pos, cache.data());
        for (int i = 0; i < rope.n_rot / 2; ++i) {
            const double theta = static_cast<double>(pos) * inv[static_cast<size_t>(i)];
            const double theta_extrap = static_cast<double>(pos) * std::pow(ref.base, -2.0 * i / ref.n_rot);
            const double bound = af * ((2.0 * i + 8.0) * std::ldexp(theta_extrap, -24) + std::ldexp(4.0, -24));
            EXPECT_NEAR(cache[2 * static_cast<size_t>(i)], std::cos(theta) * af, bound) << "pos " << pos << " pair " << i;
            EXPECT_NEAR(cache[2 * static_cast<size_t>(i) + 1], std::sin(theta) * af, bound) << "pos " << pos << " pair " << i;
        }
    }
}

/// gpt-oss's rope_scaling (config.json): YaRN x32 from 4,096 positions, theta 150,000, 64 dims.
RefRope gptoss_rope(bool truncate) {
    RefRope r;
    r.n_rot = 64;
    r.base = 150000;
    r.factor = 32;
    r.orig_ctx = 4096;
    r.yarn = true;
    r.truncate = truncate;
    return r;
}

TEST(RopeLong, GptOssYarnUpTo131072MatchesTransformers) {
    SessionOptions so;
    so.n_ctx = 131072;
    const ModelSpec spec = synth_layout("gpt-oss", "gpt-oss-120b", GgmlType::MXFP4, so).spec;
    const RefRope r = gptoss_rope(false);  // gpt-oss's config.json says truncate false
    EXPECT_NEAR(spec.rope.corr_low, 8.0928, 1e-3);   // vLLM #28244 quotes 8.0928 and 17.3980
    EXPECT_NEAR(spec.rope.corr_high, 17.3980, 1e-3);
    expect_rope_matches(spec.rope, r, {0, 1, 4095, 4096, 32768, 65535, 131071});
}

TEST(RopeLong, RoundedYarnRangeWouldMissGptOssByRadiansAtLongPositions) {
    // Why gpt-oss's truncate flag matters (llama.cpp rounds the range to 8 and 18): the angle of
    // pair 12 at position 131,071 moves by whole radians between the two ranges.
    const RefRope exact = gptoss_rope(false), rounded = gptoss_rope(true);
    double af = 0;
    const double d = 131071.0 * std::abs(ref_inv_freq(exact, &af)[12] - ref_inv_freq(rounded, &af)[12]);
    EXPECT_GT(d, 1.0);
}

TEST(RopeLong, QwenThetaUpTo262144MatchesTransformers) {
    SessionOptions so;
    so.n_ctx = 262144;
    // Qwen3-30B-A3B: theta 1e6 over 128 dims (plain RoPE; longer contexts need a YaRN setting).
    const ModelSpec q3 = synth_layout("qwen3moe", "qwen3-30b-a3b", GgmlType::Q8_0, so).spec;
    RefRope r3;
    r3.n_rot = 128;
    r3.base = 1e6;
    expect_rope_matches(q3.rope, r3, {0, 40959, 131071, 262143});
    // Qwen3-Next-80B: theta 1e7 over the first 64 of 256 dims, 262,144 positions natively.
    const ModelSpec qn = synth_layout("qwen3next", "qwen3-next-80b-a3b", GgmlType::Q8_0, so).spec;
    EXPECT_EQ(qn.n_ctx, 262144);
    RefRope rn;
    rn.n_rot = 64;
    rn.base = 1e7;
    expect_rope_matches(qn.rope, rn, {0, 65535, 131071, 262143});
}

}  // namespace
}  // namespace nitro
