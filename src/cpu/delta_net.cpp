#include "cpu/delta_net.h"

#include <algorithm>
#include <cmath>

namespace nitro::cpu {

namespace {

// 4 floats in an SSE register (GCC/clang vector extension), two of them per step: every x86-64
// CPU runs the same instructions, so results do not depend on the host's SIMD level.
typedef float v4 __attribute__((vector_size(16), aligned(4)));

inline v4 load4(const float* p) {
    v4 v;
    __builtin_memcpy(&v, p, sizeof v);
    return v;
}
inline void store4(float* p, v4 v) { __builtin_memcpy(p, &v, sizeof v); }
/// The 8 partial sums (lanes of a and b) in a fixed order.
inline float hsum(v4 a, v4 b) { return ((a[0] + b[0]) + (a[1] + b[1])) + ((a[2] + b[2]) + (a[3] + b[3])); }

/// sum_i a[i] b[i] with 8 partial sums in a fixed order.
float dot(const float* a, const float* b, int64_t n) {
    v4 s0 = {0, 0, 0, 0}, s1 = {0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        s0 += load4(a + i) * load4(b + i);
        s1 += load4(a + i + 4) * load4(b + i + 4);
    }
    float r = hsum(s0, s1);
    for (; i < n; ++i) r += a[i] * b[i];
    return r;
}

/// y[i] += alpha * x[i].
void axpy(float* y, float alpha, const float* x, int64_t n) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) store4(y + i, load4(y + i) + alpha * load4(x + i));
    for (; i < n; ++i) y[i] += alpha * x[i];
}

/// One row of the state for one token (gated_delta_rule_steps): m *= e; delta = (v_j - m.k) beta;
/// m += delta k; returns m.q. Two passes over the row.
float step_row(float* m, const float* k, const float* q, float e, float vj, float beta, int64_t d) {
    v4 s0 = {0, 0, 0, 0}, s1 = {0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= d; i += 8) {
        const v4 m0 = load4(m + i) * e, m1 = load4(m + i + 4) * e;
        store4(m + i, m0);
        store4(m + i + 4, m1);
        s0 += m0 * load4(k + i);
        s1 += m1 * load4(k + i + 4);
    }
    float sk = hsum(s0, s1);
    for (int64_t t = i; t < d; ++t) {
        m[t] *= e;
        sk += m[t] * k[t];
    }
    const float delta = (vj - sk) * beta;
    v4 o0 = {0, 0, 0, 0}, o1 = {0, 0, 0, 0};
    for (i = 0; i + 8 <= d; i += 8) {
        const v4 m0 = load4(m + i) + delta * load4(k + i), m1 = load4(m + i + 4) + delta * load4(k + i + 4);
        store4(m + i, m0);
        store4(m + i + 4, m1);
        o0 += m0 * load4(q + i);
        o1 += m1 * load4(q + i + 4);
    }
    float so = hsum(o0, o1);
    for (int64_t t = i; t < d; ++t) {
        m[t] += delta * k[t];
        so += m[t] * q[t];
    }
    return so;
}

}  // namespace

void l2_norm(float* x, int64_t n, float eps) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
    const float scale = 1.0f / std::max(std::sqrt(static_cast<float>(sum)), eps);
    for (int64_t i = 0; i < n; ++i) x[i] *= scale;
}

void ssm_conv_silu(const ConvArgs& a, int64_t c0, int64_t c1) {
    const int64_t K = a.d_conv, S = K - 1;
    float win[64];  // state + the newest input; d_conv is 4 in every known model (checked by the caller: <= 64)
    for (int64_t c = c0; c < c1; ++c) {
        float* st = a.state + c * S;
        const float* w = a.w + c * K;
        for (int64_t j = 0; j < S; ++j) win[j] = st[j];
        for (int64_t t = 0; t < a.n; ++t) {
            win[S] = a.x[a.rows[t] * a.x_stride + c];
            float sum = 0.0f;
            for (int64_t j = 0; j < K; ++j) sum += win[j] * w[j];
            a.out[a.rows[t] * a.out_stride + c] = silu(sum);
            for (int64_t j = 0; j < S; ++j) win[j] = win[j + 1];
        }
        for (int64_t j = 0; j < S; ++j) st[j] = win[j];
    }
}

void gated_delta_rule_steps(const DeltaHeadArgs& a) {
    const int64_t d = a.d;
    const float scale = 1.0f / std::sqrt(static_cast<float>(d));
    for (int64_t t = 0; t < a.n; ++t) {
        const int64_t r = a.rows[t];
        const float* q = a.q + r * a.q_stride;
        const float* k = a.k + r * a.k_stride;
        const float* v = a.v + r * a.v_stride;
        const float e = std::exp(a.g[r * a.gb_stride]);
        const float beta = a.beta[r * a.gb_stride];
        float* o = a.out + r * a.out_stride;
        // Rows of M are independent: decay, predict, correct and read out one row at a time.
        for (int64_t j = 0; j < d; ++j) o[j] = step_row(a.M + j * d, k, q, e, v[j], beta, d) * scale;
    }
}

void gated_delta_rule_chunked(const DeltaHeadArgs& a, DeltaScratch& s, int64_t chunk) {
    const int64_t d = a.d;
    const float scale = 1.0f / std::sqrt(static_cast<float>(d));
    const int64_t C = std::min(chunk, a.n);
    s.q.resize(static_cast<size_t>(C * d));
    s.k.resize(static_cast<size_t>(C * d));
    s.kb.resize(static_cast<size_t>(C * d));
    s.u.resize(static_cast<size_t>(C * d));
    s.w.resize(static_cast<size_t>(C * d));
    s.vnew.resize(static_cast<size_t>(C * d));
    s.gc.resize(static_cast<size_t>(C));
    s.A.resize(static_cast<size_t>(C * C));
    s.qk.resize(static_cast<size_t>(C * C));
    float *Q = s.q.data(), *K = s.k.data(), *KB = s.kb.data(), *U = s.u.data(), *W = s.w.data(), *VN = s.vnew.data();
    float *gc = s.gc.data(), *A = s.A.data(), *QK = s.qk.data();
    std::vector<float> beta(static_cast<size_t>(C));

    for (int64_t c0 = 0; c0 < a.n; c0 += C) {
        const int64_t L = std::min(C, a.n - c0);
        const int64_t* rows = a.rows + c0;
        // Load the chunk: q scaled, k, the cumulative log decay.
        float acc = 0.0f;
        for (int64_t t = 0; t < L; ++t) {
            const int64_t r = rows[t];
            const float* q = a.q + r * a.q_stride;
            const float* k = a.k + r * a.k_stride;
            for (int64_t i = 0; i < d; ++i) Q[t * d + i] = q[i] * scale;
            std::copy(k, k + d, K + t * d);
            acc += a.g[r * a.gb_stride];
            gc[t] = acc;
            beta[static_cast<size_t>(t)] = a.beta[r * a.gb_stride];
        }
        // A[t][s] = beta_t (k_t . k_s) exp(gc_t - gc_s), s < t; then T = (I + A)^-1 in place
        // (unit lower triangular, forward substitution row by row, s ascending).
        for (int64_t t = 0; t < L; ++t) {
            for (int64_t j = 0; j < t; ++j)
                A[t * C + j] = beta[static_cast<size_t>(t)] * dot(K + t * d, K + j * d, d) * std::exp(gc[t] - gc[j]);
            for (int64_t j = 0; j < t; ++j) {
                float sum = A[t * C + j];
                for (int64_t m = j + 1; m < t; ++m) sum += A[t * C + m] * A[m * C + j];
                A[t * C + j] = -sum;
            }
        }
        // U = T (beta v), W = T (beta exp(gc) k).
        for (int64_t t = 0; t < L; ++t) {
            float* u = U + t * d;
            float* w = W + t * d;
            std::fill(u, u + d, 0.0f);
            std::fill(w, w + d, 0.0f);
            for (int64_t j = 0; j <= t; ++j) {
                const float T = j == t ? 1.0f : A[t * C + j];
                const float bj = beta[static_cast<size_t>(j)];
                axpy(u, T * bj, a.v + rows[j] * a.v_stride, d);
                axpy(w, T * bj * std::exp(gc[j]), K + j * d, d);
            }
        }
        // Intra-chunk scores tril(q k^T exp(gc_t - gc_s)).
        for (int64_t t = 0; t < L; ++t)
            for (int64_t j = 0; j <= t; ++j) QK[t * C + j] = dot(Q + t * d, K + j * d, d) * std::exp(gc[t] - gc[j]);
        // v_new = U - W S; out = exp(gc) q S (inter-chunk), one state row (value dim) at a time.
        for (int64_t jv = 0; jv < d; ++jv) {
            const float* m = a.M + jv * d;
            for (int64_t t = 0; t < L; ++t) {
                VN[t * d + jv] = U[t * d + jv] - dot(W + t * d, m, d);
                a.out[rows[t] * a.out_stride + jv] = std::exp(gc[t]) * dot(Q + t * d, m, d);
            }
        }
        // out += tril(QK) v_new.
        for (int64_t t = 0; t < L; ++t) {
            float* o = a.out + rows[t] * a.out_stride;
            for (int64_t j = 0; j <= t; ++j) axpy(o, QK[t * C + j], VN + j * d, d);
        }
        // S = exp(gc_last) S + (k exp(gc_last - gc))^T v_new.
        const float g_last = gc[L - 1];
        for (int64_t t = 0; t < L; ++t) {
            const float e = std::exp(g_last - gc[t]);
            for (int64_t i = 0; i < d; ++i) KB[t * d + i] = K[t * d + i] * e;
        }
        const float e_last = std::exp(g_last);
        for (int64_t jv = 0; jv < d; ++jv) {
            float* m = a.M + jv * d;
            for (int64_t i = 0; i < d; ++i) m[i] *= e_last;
            for (int64_t t = 0; t < L; ++t) axpy(m, VN[t * d + jv], KB + t * d, d);
        }
    }
}

}  // namespace nitro::cpu
