#include "cpu/moe.h"

#include "core/error.h"
#include "cpu/kernels.h"
#include "cpu/ops.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string_view>
#include <thread>

#include <immintrin.h>

namespace nitro::cpu {

uint64_t ExpertWeights::expert_bytes() const {
    auto one = [](const GgufTensorInfo* t) { return t ? t->n_bytes / static_cast<uint64_t>(t->ne[2]) : 0; };
    return one(gate) + one(up) + one(down);
}

namespace {

/// The experts of the best topk_group groups of s (a group scores the sum of its two best values,
/// the better one first; ties to the lower group and the lower id) stay, the others become -inf.
void keep_best_groups(float* s, int64_t X, int n_group, int topk_group) {
    const int64_t gs = X / n_group;
    float group_score[kMaxExpertGroups];
    for (int g = 0; g < n_group; ++g) {
        int32_t best2[2];
        top_k(s + g * gs, gs, 2, best2);
        group_score[g] = s[g * gs + best2[0]] + s[g * gs + best2[1]];
    }
    int32_t keep[kMaxExpertGroups];
    top_k(group_score, n_group, topk_group, keep);
    for (int g = 0; g < n_group; ++g)
        if (std::find(keep, keep + topk_group, g) == keep + topk_group) std::fill(s + g * gs, s + (g + 1) * gs, -INFINITY);
}

}  // namespace

void route(const RouteArgs& a) {
    const GatingSpec& g = a.gating;
    const int64_t X = a.n_expert;
    const int K = a.k;
    // Plain softmax gatings keep their margin in nats (the arithmetic of the first two gatings).
    const bool plain = !g.score_bias && g.n_group <= 1;
    std::vector<float> biased(plain ? 0 : static_cast<size_t>(X));
    for (int64_t i = 0; i < a.n; ++i) {
        float* lg = a.logits + i * X;  // becomes the scores
        if (a.logit_bias) add(lg, a.logit_bias, X);
        if (!g.weights_from_logits) {
            if (g.score == GatingSpec::Score::Softmax) softmax(lg, X);
            else
                for (int64_t e = 0; e < X; ++e) lg[e] = 1.0f / (1.0f + std::exp(-lg[e]));
        }
        const float* sel_from = lg;  // what the selection ranks: the scores, + the bias, groups kept
        if (!plain) {
            std::copy(lg, lg + X, biased.data());
            if (g.score_bias) add(biased.data(), a.score_bias, X);
            if (g.n_group > 1) keep_best_groups(biased.data(), X, g.n_group, g.topk_group);
            sel_from = biased.data();
        }
        int32_t* sel = a.ids + i * K;
        float* w = a.weights + i * K;
        top_k(sel_from, X, K, sel);
        const float m = top_k_margin(sel_from, X, K, sel);
        for (int j = 0; j < K; ++j) w[j] = lg[sel[j]];
        if (g.weights_from_logits) softmax(w, K);
        if (g.norm_weights) {
            float sum = 0.f;
            for (int j = 0; j < K; ++j) sum += w[j];
            sum = std::max(sum, kMinWeightsSum);
            for (int j = 0; j < K; ++j) w[j] /= sum;
        }
        if (g.weights_scale != 1.0f)
            for (int j = 0; j < K; ++j) w[j] *= g.weights_scale;
        if (a.margin) {
            // softmax scores: log(p_k / p_best_unselected), the margin of the logits
            const bool nats = plain && g.score == GatingSpec::Score::Softmax && !g.weights_from_logits;
            a.margin[i] = nats && !std::isinf(m) ? std::log(lg[sel[K - 1]]) - std::log(lg[sel[K - 1]] - m) : m;
        }
    }
}

namespace {

/// Rows of gate/up per unit of the gate/up pass (a divisor of 256, see the quantization groups),
/// and output columns per unit of the down pass. A gate/up unit of gpt-oss MXFP4 reads 2 x 48 KiB
/// (both matrices in blocks of 4 rows, run_rows_interleaved); a down unit 16 rows of every computed expert,
/// small enough for ~10 units per thread at 16 threads (E = 2880: 180 units) to balance the pass.
constexpr int64_t kRows1 = 32;
constexpr int64_t kRows2 = 16;
/// Values per piece of the activation quantization (a multiple of every image group, act_layout).
constexpr int64_t kPiece = 256;
/// Cost of a gate/up unit relative to one token's arithmetic, for the initial split: reading the
/// rows costs about as much as this many tokens' dot products (the split only needs to be close;
/// stealing evens out the rest).
constexpr int64_t kMemTokens = 4;

/// Order of the down pass inside a unit: false (the default) runs each computed expert's kRows2
/// rows in turn, one contiguous run per expert; true goes 4 rows of every expert at a time
/// (run_rows_interleaved), the order before 2026-12-04. The same kernel calls either way, so the
/// same results. MEASURED on the 2-vCPU AVX2 development VM (gpt-oss-20b synth, 2 threads, two A/B
/// pairs): expert down 17.8 / 17.2 GB/s interleaved, 20.0 / 21.1 in turn. NITRO_MOE_DOWN=rows
/// selects the interleaved order, for A/B runs on other machines.
bool down_rows_interleaved() {
    static const bool v = [] {
        const char* e = std::getenv("NITRO_MOE_DOWN");
        return e && std::string_view(e) == "rows";
    }();
    return v;
}

/// Spins (then yields) until `a` reaches `target`; acquire, so the writes counted are visible.
void spin_until(const std::atomic<int64_t>& a, int64_t target) {
    for (int spins = 0; a.load(std::memory_order_acquire) < target; ++spins) {
        if (spins < 8192) _mm_pause();
        else std::this_thread::yield();
    }
}

}  // namespace

/// Counters of one region.
struct MoeScratch::Sync {
    alignas(64) std::atomic<int64_t> next0{0};
    alignas(64) std::atomic<int64_t> done0{0};
    alignas(64) std::atomic<int64_t> done1{0};
    WorkRanges r1, r2;
    std::unique_ptr<std::atomic<int32_t>[]> group_done;  ///< per (computed expert, 256-row group)
    size_t group_cap = 0;
    double t_gate_up_done = 0;
};

MoeScratch::MoeScratch() : sync(std::make_unique<Sync>()) {}
MoeScratch::~MoeScratch() = default;
MoeScratch::MoeScratch(MoeScratch&&) noexcept = default;
MoeScratch& MoeScratch::operator=(MoeScratch&&) noexcept = default;

MoeStats moe_ffn(ThreadPool& pool, const ExpertWeights& ex, const float* h, int64_t n, int K, const int32_t* ids,
                 const float* weights, const uint8_t* skip, float* out, MoeScratch& s, uint8_t* const* copy_to) {
    const int64_t E = ex.n_embd(), F = ex.n_ff(), X = ex.n_expert();
    MoeStats st;
    using Clock = std::chrono::steady_clock;
    const auto t0 = Clock::now();
    auto since = [](Clock::time_point a) { return std::chrono::duration<double>(Clock::now() - a).count(); };
    // Group the computed (token, j) pairs by expert: MUL_MAT_ID runs each selected expert once
    // over all tokens that chose it. Grouped row g -> pair r = t*K + j.
    const int64_t R = n * K;
    s.count.assign(static_cast<size_t>(X) + 1, 0);
    int64_t rows = 0;
    for (int64_t r = 0; r < R; ++r) {
        const int32_t e = ids[r];
        if (e < 0 || e >= X) fail("moe_ffn: expert id {} out of range [0, {})", e, X);
        if (skip && skip[e]) continue;
        ++s.count[static_cast<size_t>(e) + 1];
        ++rows;
    }
    for (int64_t e = 0; e < X; ++e) s.count[static_cast<size_t>(e) + 1] += s.count[static_cast<size_t>(e)];
    s.fill.assign(s.count.begin(), s.count.end() - 1);
    s.group_rows.resize(static_cast<size_t>(rows));
    s.group_tok.resize(static_cast<size_t>(rows));
    s.row_of.assign(static_cast<size_t>(R), -1);
    for (int64_t r = 0; r < R; ++r) {
        const int32_t e = ids[r];
        if (skip && skip[e]) continue;
        const int64_t g = s.fill[static_cast<size_t>(e)]++;
        s.group_rows[static_cast<size_t>(g)] = static_cast<int32_t>(r);
        s.group_tok[static_cast<size_t>(g)] = static_cast<int32_t>(r / K);
        s.row_of[static_cast<size_t>(r)] = static_cast<int32_t>(g);
    }
    // Only the tokens with a computed pair need their input quantized: a hybrid prompt group leaves
    // the CPU a few experts of thousands of tokens (a 13,000-token group quantized every token's
    // 2880 inputs per layer for a few hundred rows).
    s.used_tok.clear();
    for (int64_t t = 0; t < n; ++t)
        for (int64_t j = 0; j < K; ++j)
            if (s.row_of[static_cast<size_t>(t * K + j)] >= 0) {
                s.used_tok.push_back(static_cast<int32_t>(t));
                break;
            }
    const int64_t n_used = static_cast<int64_t>(s.used_tok.size());
    s.iota.resize(static_cast<size_t>(rows));
    std::iota(s.iota.begin(), s.iota.end(), 0);
    s.xs.clear();
    s.xb.clear();
    s.xc.clear();
    for (int64_t e = 0; e < X; ++e) {
        const int64_t b = s.count[static_cast<size_t>(e)], c = s.count[static_cast<size_t>(e) + 1] - b;
        if (c == 0) continue;
        s.xs.push_back(static_cast<int32_t>(e));
        s.xb.push_back(b);
        s.xc.push_back(c);
    }
    const int64_t nx = static_cast<int64_t>(s.xs.size());
    st.experts = nx;
    st.bytes = static_cast<uint64_t>(nx) * ex.expert_bytes();
    st.rows = rows;
    if (rows == 0) {
        std::fill(out, out + n * E, 0.f);
        st.gate_up_s = since(t0);
        return st;
    }

    // Buffers and the three products of every computed expert, checked before the region.
    s.gate.resize(static_cast<size_t>(rows * F));
    s.up.resize(static_cast<size_t>(rows * F));
    s.down.resize(static_cast<size_t>(rows * E));
    const bool same_up = ex.up->type == ex.gate->type;
    act_buffer_init(s.acts, n, E, ex.gate->type);
    if (!same_up) act_buffer_init(s.acts2, n, E, ex.up->type);
    const ActBuffer& acts_up = same_up ? s.acts : s.acts2;
    act_buffer_init(s.acts_down, rows, F, ex.down->type);
    s.jg.clear();
    s.ju.clear();
    s.jd.clear();
    for (int64_t xi = 0; xi < nx; ++xi) {
        const int32_t x = s.xs[static_cast<size_t>(xi)];
        const int64_t b = s.xb[static_cast<size_t>(xi)], c = s.xc[static_cast<size_t>(xi)];
        const int32_t* tok = &s.group_tok[static_cast<size_t>(b)];
        s.jg.push_back({expert_view(*ex.gate, x), &s.acts, tok, c, &s.gate[static_cast<size_t>(b * F)], F});
        s.ju.push_back({expert_view(*ex.up, x), &acts_up, tok, c, &s.up[static_cast<size_t>(b * F)], F});
        s.jd.push_back({expert_view(*ex.down, x), &s.acts_down, &s.iota[static_cast<size_t>(b)], c,
                        &s.down[static_cast<size_t>(b * E)], E});
    }
    for (const auto* js : {&s.jg, &s.ju, &s.jd}) check_matmul_job(js->front());
    const kernels::Kernel fg = kernels::active_kernel(ex.gate->type), fu = kernels::active_kernel(ex.up->type),
                          fd = kernels::active_kernel(ex.down->type);

    // Pass 0: activation pieces (token, 256 values) of h for gate (and up when its type differs),
    // of the tokens with a computed pair.
    const int64_t pieces_per_row = (E + kPiece - 1) / kPiece;
    const int64_t n0 = n_used * pieces_per_row * (same_up ? 1 : 2);
    // Pass 1: units (expert, 16 rows), initial split by estimated cost.
    const int64_t units_per_x = (F + kRows1 - 1) / kRows1;
    const int64_t n1 = nx * units_per_x;
    const int64_t groups = (F + kPiece - 1) / kPiece;
    const int W = pool.size();
    s.split.resize(static_cast<size_t>(W) + 1);
    {
        int64_t total = 0;
        for (int64_t xi = 0; xi < nx; ++xi) total += units_per_x * (s.xc[static_cast<size_t>(xi)] + kMemTokens);
        int64_t u = 0, acc = 0;
        s.split[0] = 0;
        for (int w = 1; w <= W; ++w) {
            const int64_t target = total * w / W;
            while (u < n1 && acc < target) acc += s.xc[static_cast<size_t>(u / units_per_x)] + kMemTokens, ++u;
            s.split[static_cast<size_t>(w)] = w == W ? n1 : u;
        }
    }
    if (!s.sync) s.sync = std::make_unique<MoeScratch::Sync>();  // a moved-from scratch
    MoeScratch::Sync& y = *s.sync;
    y.r1.reset(s.split);
    // Pass 2: units of 16 output columns over all computed experts, equal cost.
    const int64_t n2 = (E + kRows2 - 1) / kRows2;
    for (int w = 0; w <= W; ++w) s.split[static_cast<size_t>(w)] = n2 * w / W;
    y.r2.reset(s.split);
    const size_t n_groups = static_cast<size_t>(nx * groups);
    if (n_groups > y.group_cap) {
        y.group_done = std::make_unique<std::atomic<int32_t>[]>(n_groups);
        y.group_cap = n_groups;
    }
    for (size_t i = 0; i < n_groups; ++i) y.group_done[i].store(0, std::memory_order_relaxed);
    y.next0.store(0, std::memory_order_relaxed);
    y.done0.store(0, std::memory_order_relaxed);
    y.done1.store(0, std::memory_order_relaxed);

    // Copy-on-compute: bytes of one expert's gate/up/down slices and their rows.
    const size_t gate_row = row_size(ex.gate->type, E), up_row = row_size(ex.up->type, E), down_row = row_size(ex.down->type, F);
    const size_t gate_bytes = gate_row * static_cast<size_t>(F), up_bytes = up_row * static_cast<size_t>(F);
    auto copy_rows = [&](int32_t x, const GgufTensorInfo* t, size_t row, size_t offset, int64_t r0, int64_t r1) {
        const size_t per_expert = row * static_cast<size_t>(t->ne[1]);
        std::memcpy(copy_to[x] + offset + static_cast<size_t>(r0) * row,
                    t->data + static_cast<size_t>(x) * per_expert + static_cast<size_t>(r0) * row,
                    static_cast<size_t>(r1 - r0) * row);
    };
    auto gate_up_unit = [&](int64_t u) {
        const int64_t xi = u / units_per_x, r0 = (u % units_per_x) * kRows1, r1 = std::min(F, r0 + kRows1);
        const int32_t x = s.xs[static_cast<size_t>(xi)];
        const int64_t b = s.xb[static_cast<size_t>(xi)], c = s.xc[static_cast<size_t>(xi)];
        const MatmulJob* gu[2] = {&s.jg[static_cast<size_t>(xi)], &s.ju[static_cast<size_t>(xi)]};
        const kernels::Kernel fgu[2] = {fg, fu};
        kernels::run_rows_interleaved(gu, fgu, 2, r0, r1);
        if (copy_to && copy_to[x]) {
            copy_rows(x, ex.gate, gate_row, 0, r0, r1);
            copy_rows(x, ex.up, up_row, gate_bytes, r0, r1);
        }
        for (int64_t g = b; g < b + c; ++g) {
            float* gr = &s.gate[static_cast<size_t>(g * F + r0)];
            float* ur = &s.up[static_cast<size_t>(g * F + r0)];
            if (ex.gate_b) add(gr, ex.gate_b + x * F + r0, r1 - r0);
            if (ex.up_b) add(ur, ex.up_b + x * F + r0, r1 - r0);
            if (ex.act == FfnAct::SwigluOai) swiglu_oai(gr, ur, r1 - r0, 1.702f, 7.0f, gr);
            else swiglu(gr, ur, r1 - r0, gr);
        }
        // The last unit of a 256-row group quantizes the group for the down product.
        const int64_t grp = r0 / kPiece, g0 = grp * kPiece, glen = std::min(kPiece, F - g0);
        const int32_t units_in_group = static_cast<int32_t>((glen + kRows1 - 1) / kRows1);
        if (y.group_done[static_cast<size_t>(xi * groups + grp)].fetch_add(1, std::memory_order_acq_rel) + 1 ==
            units_in_group) {
            for (int64_t g = b; g < b + c; ++g) quantize_act_piece(s.acts_down, g, &s.gate[static_cast<size_t>(g * F)], g0, glen);
        }
    };
    auto down_unit = [&](int64_t u) {
        const int64_t c0 = u * kRows2, c1 = std::min(E, c0 + kRows2);
        if (nx <= 16 && down_rows_interleaved()) {
            const MatmulJob* js[16];
            kernels::Kernel fs[16];
            for (int64_t xi = 0; xi < nx; ++xi) js[xi] = &s.jd[static_cast<size_t>(xi)], fs[xi] = fd;
            kernels::run_rows_interleaved(js, fs, static_cast<int>(nx), c0, c1);
        } else {
            for (int64_t xi = 0; xi < nx; ++xi) kernels::run_rows(s.jd[static_cast<size_t>(xi)], fd, c0, c1);
        }
        if (copy_to)
            for (int64_t xi = 0; xi < nx; ++xi) {
                const int32_t x = s.xs[static_cast<size_t>(xi)];
                if (copy_to[x]) copy_rows(x, ex.down, down_row, gate_bytes + up_bytes, c0, c1);
            }
        // Weighted sum of these columns over each token's computed experts, in router order.
        for (int64_t i = 0; i < n; ++i) {
            float* o = out + i * E;
            std::fill(o + c0, o + c1, 0.f);
            for (int64_t j = 0; j < K; ++j) {
                const int64_t r = i * K + j;
                const int32_t g = s.row_of[static_cast<size_t>(r)];
                if (g < 0) continue;
                const int64_t x = ids[r];
                float* d = &s.down[static_cast<size_t>(g) * static_cast<size_t>(E)];
                if (ex.down_b) add(d + c0, ex.down_b + x * E + c0, c1 - c0);
                const float wt = weights[r];
                for (int64_t col = c0; col < c1; ++col) o[col] += wt * d[col];
            }
        }
    };
    auto worker = [&](int w) {
        for (int64_t p; (p = y.next0.fetch_add(1, std::memory_order_relaxed)) < n0;) {
            const bool second = p >= n_used * pieces_per_row;
            const int64_t q = second ? p - n_used * pieces_per_row : p;
            const int64_t t = s.used_tok[static_cast<size_t>(q / pieces_per_row)], v0 = (q % pieces_per_row) * kPiece;
            quantize_act_piece(second ? s.acts2 : s.acts, t, h + t * E, v0, std::min(kPiece, E - v0));
            y.done0.fetch_add(1, std::memory_order_release);
        }
        spin_until(y.done0, n0);
        for (int64_t u; y.r1.next(w, u);) {
            gate_up_unit(u);
            y.done1.fetch_add(1, std::memory_order_release);
        }
        spin_until(y.done1, n1);
        if (w == 0) y.t_gate_up_done = since(t0);
        for (int64_t u; y.r2.next(w, u);) down_unit(u);
    };
    pool.parallel_for(W, 1, [&](int64_t b, int64_t e, int) {
        for (int64_t w = b; w < e; ++w) worker(static_cast<int>(w));
    });
    st.gate_up_s = y.t_gate_up_done;
    st.down_s = since(t0) - st.gate_up_s;
    return st;
}

}  // namespace nitro::cpu
