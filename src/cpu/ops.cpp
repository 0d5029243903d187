#include "cpu/ops.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace nitro::cpu {

void rms_norm(const float* x, const float* w, int64_t n, float eps, float* out) {
    // ggml sums squares in ggml_float (double) on the CPU.
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
    const float scale = 1.0f / std::sqrt(static_cast<float>(sum / static_cast<double>(n)) + eps);
    if (w)
        for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale * w[i];
    else
        for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale;
}

void add(float* x, const float* b, int64_t n) {
    for (int64_t i = 0; i < n; ++i) x[i] += b[i];
}

namespace {

float yarn_ramp(float low, float high, int i0) {
    const float y = (static_cast<float>(i0 / 2) - low) / std::max(0.001f, high - low);
    return 1.0f - std::min(1.0f, std::max(0.0f, y));
}

}  // namespace

void rope_cache(const RopeParams& p, int64_t pos, float* cache) {
    const float theta_scale = std::pow(p.freq_base, -2.0f / static_cast<float>(p.n_rot));
    float theta_extrap = static_cast<float>(pos);
    for (int i0 = 0; i0 < p.n_rot; i0 += 2) {
        const float theta_interp = p.freq_scale * theta_extrap;
        float theta = theta_interp;
        float mscale = p.attn_factor;
        if (p.ext_factor != 0.0f) {
            const float ramp_mix = yarn_ramp(p.corr_low, p.corr_high, i0) * p.ext_factor;
            theta = theta_interp * (1 - ramp_mix) + theta_extrap * ramp_mix;
            mscale *= 1.0f + 0.1f * std::log(1.0f / p.freq_scale);
        }
        cache[i0] = std::cos(theta) * mscale;
        cache[i0 + 1] = std::sin(theta) * mscale;
        theta_extrap *= theta_scale;
    }
}

void rope_neox(float* x, int64_t n_heads, int64_t head_dim, int n_rot, const float* cache) {
    const int half = n_rot / 2;
    for (int64_t h = 0; h < n_heads; ++h) {
        float* v = x + h * head_dim;
        for (int i = 0; i < half; ++i) {
            const float c = cache[2 * i], s = cache[2 * i + 1];
            const float a = v[i], b = v[i + half];
            v[i] = a * c - b * s;
            v[i + half] = a * s + b * c;
        }
    }
}

void softmax(float* x, int64_t n) {
    float m = -INFINITY;
    for (int64_t i = 0; i < n; ++i) m = std::max(m, x[i]);
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) {
        x[i] = std::exp(x[i] - m);
        sum += x[i];
    }
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void swiglu(const float* gate, const float* up, int64_t n, float* out) {
    for (int64_t i = 0; i < n; ++i) {
        const float g = gate[i];
        out[i] = g / (1.0f + std::exp(-g)) * up[i];
    }
}

void swiglu_oai(const float* gate, const float* up, int64_t n, float alpha, float limit, float* out) {
    for (int64_t i = 0; i < n; ++i) {
        const float g = std::min(gate[i], limit);
        const float u = std::clamp(up[i], -limit, limit);
        out[i] = g / (1.0f + std::exp(-alpha * g)) * (u + 1.0f);
    }
}

void top_k(const float* x, int64_t n, int k, int32_t* idx) {
    // Partial selection, k is small (<= 16 in practice).
    std::vector<int32_t> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [x](int32_t a, int32_t b) {
        return x[a] > x[b] || (x[a] == x[b] && a < b);
    });
    std::copy(order.begin(), order.begin() + k, idx);
}

float top_k_margin(const float* x, int64_t n, int k, const int32_t* idx) {
    float best = -INFINITY;
    for (int64_t i = 0; i < n; ++i) {
        if (std::find(idx, idx + k, static_cast<int32_t>(i)) != idx + k) continue;
        best = std::max(best, x[i]);
    }
    return k >= n ? INFINITY : x[idx[k - 1]] - best;
}

}  // namespace nitro::cpu
