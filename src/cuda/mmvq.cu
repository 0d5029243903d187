// Integer decode products (mmvq.h): the 8-bit activation quantizer, the matrix-vector kernel and
// the decode MoE's gate/up and down kernels. One warp per output row; each lane takes the row's
// 16-value chunks lane, lane + 32, ... (q8dot.cuh), two at a time so two loads are in flight, and
// the warp sums its lanes at the end. Q4_K and Q5_K rows go in units of two chunks that share
// their quant bytes (lane_chunks, mmvq_pairs).
#include "cuda/mmvq.h"

#include "cpu/matmul.h"
#include "cuda/common.cuh"
#include "cuda/pdl.cuh"
#include "cuda/q8dot.cuh"
#include "ops/gpu_limits.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <span>

namespace nitro::cuda {

namespace {

constexpr int kQ8Rows = 8;  ///< output rows (warps) per CTA
constexpr int kQ8Threads = kQ8Rows * kWarp;
constexpr int kMaxMulti = 4;  ///< matrices per mmvq_multi launch

template <GgmlType VDT>
__global__ void __launch_bounds__(256) quantize_q8_kernel(const float* __restrict__ x, int64_t ldx, int64_t n,
                                                          int8_t* __restrict__ q, float* __restrict__ d) {
    pdl_begin();
    const int64_t r = blockIdx.y;
    const int64_t c = blockIdx.x * 256LL + threadIdx.x;
    const bool in = c < n;
    int qi;
    float di;
    q8_value<VDT>(in ? x[r * ldx + c] : 0.f, qi, di);
    if (!in) return;
    q[r * n + c] = static_cast<int8_t>(qi);
    if ((c & 31) == 0) d[r * (n / 32) + c / 32] = di;
}

/// This lane's chunks of NR weight rows, in the order every decode kernel sums them. P = false:
/// chunks c = lane, lane + 32, ... one at a time (Q8Dot::load). P = true (kPairChunks types):
/// units u = lane, lane + 32, ... of two chunks, pair_chunk(u) and pair_chunk(u) + 2, from one
/// Q8Dot::load_pair. U units are loaded (for every row) before use(r, chunk, c) consumes them, in
/// unit order and, inside a unit, chunk order: the same sums whatever U is.
template <GgmlType T, int U, bool P, int NR, class Use>
__device__ __forceinline__ void lane_chunks(const uint8_t* const (&rows)[NR], int n_chunks, Use&& use) {
    constexpr int kPer = P ? 2 : 1;  // chunks per unit
    const int n_units = n_chunks / kPer;
    auto first = [](int u) { return P ? pair_chunk(u) : u; };
    auto load = [&](int u, Chunk(&k)[NR][kPer]) {
#pragma unroll
        for (int r = 0; r < NR; ++r) {
            if constexpr (P)
                Q8Dot<T>::load_pair(rows[r], first(u), k[r][0], k[r][1]);
            else
                Q8Dot<T>::load(rows[r], u, k[r][0]);
        }
    };
    auto consume = [&](int u, const Chunk(&k)[NR][kPer]) {
        const int c = first(u);
#pragma unroll
        for (int j = 0; j < kPer; ++j)
#pragma unroll
            for (int r = 0; r < NR; ++r) use(r, k[r][j], c + 2 * j);
    };
    int u = threadIdx.x % kWarp;
    for (; u + (U - 1) * kWarp < n_units; u += U * kWarp) {
        Chunk k[U][NR][kPer];
#pragma unroll
        for (int i = 0; i < U; ++i) load(u + i * kWarp, k[i]);
#pragma unroll
        for (int i = 0; i < U; ++i) consume(u + i * kWarp, k[i]);
    }
    for (; u < n_units; u += kWarp) {
        Chunk k[NR][kPer];
        load(u, k);
        consume(u, k);
    }
}

/// Sum over this lane's chunks of one weight row, for NT tokens (lane_chunks' order).
template <GgmlType T, int NT, int U, bool P>
__device__ __forceinline__ void row_dot(const uint8_t* __restrict__ row, int n_chunks, const int8_t* __restrict__ xq,
                                        const float* __restrict__ xd, int64_t ne0, int nt, float (&acc)[NT]) {
    const int64_t nb = ne0 / 32;
    const uint8_t* const rows[1] = {row};
    lane_chunks<T, U, P>(rows, n_chunks, [&](int, const Chunk& k, int c) {
#pragma unroll
        for (int t = 0; t < NT; ++t)
            if (t < nt) acc[t] += dot_chunk<T>(k, c, xq + t * ne0, xd + t * nb);
    });
}

/// -1 until the first mmvq_pairs() (then NITRO_MMVQ_PAIRS, default on), or what set_mmvq_pairs set.
std::atomic<int> g_pairs{-1};

/// Calls f.template operator()<P>() with P = whether type T's lanes take units of two chunks
/// (kPairChunks<T> and mmvq_pairs()).
template <GgmlType T, class F>
void with_pairs(F&& f) {
    if constexpr (kPairChunks<T>) {
        if (mmvq_pairs()) return f.template operator()<true>();
    }
    f.template operator()<false>();
}

/// -1 until the first mmvq_chunks() (then NITRO_MMVQ_CHUNKS or 0), or what set_mmvq_chunks set.
std::atomic<int> g_chunks{-1};

/// Calls f.template operator()<U>() with U = the chunks in flight per lane (mmvq_chunks(); 0: dflt).
template <int kDefault, class F>
void with_chunks(F&& f) {
    switch (mmvq_chunks()) {
        case 1: f.template operator()<1>(); break;
        case 2: f.template operator()<2>(); break;
        case 4: f.template operator()<4>(); break;
        default: f.template operator()<kDefault>(); break;
    }
}

template <GgmlType T, int NT, int U, bool P>
__global__ void __launch_bounds__(kQ8Threads)
    mmvq_kernel(const uint8_t* __restrict__ W, size_t row_bytes, int n_rows, const int8_t* __restrict__ xq,
                const float* __restrict__ xd, int64_t ne0, int n_tok, float* __restrict__ out, int64_t ldo,
                const float* __restrict__ bias, int accumulate) {
    pdl_begin();
    const int r = blockIdx.x * kQ8Rows + threadIdx.x / kWarp;
    if (r >= n_rows) return;
    const int t0 = blockIdx.y * NT;
    const int nt = min(NT, n_tok - t0);
    float acc[NT];
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[t] = 0.f;
    row_dot<T, NT, U, P>(W + static_cast<size_t>(r) * row_bytes, static_cast<int>(ne0 / 16), xq + t0 * ne0,
                         xd + t0 * (ne0 / 32), ne0, nt, acc);
#pragma unroll
    for (int t = 0; t < NT; ++t) {
        const float v = warp_sum(acc[t]);
        if (threadIdx.x % kWarp == 0 && t < nt) {
            float* o = out + (t0 + t) * ldo + r;
            const float y = v + (bias ? bias[r] : 0.f);
            *o = accumulate ? *o + y : y;
        }
    }
}

/// mmvq_multi: up to kMaxMulti matrices of one type on the same activations, one launch; block
/// x of the grid belongs to matrix m for first_block[m] <= x < first_block[m + 1].
struct MultiArgs {
    const uint8_t* W[kMaxMulti];
    size_t row_bytes[kMaxMulti];
    int n_rows[kMaxMulti];
    float* out[kMaxMulti];
    int64_t ldo[kMaxMulti];
    const float* bias[kMaxMulti];
    int first_block[kMaxMulti + 1];
    int n;
};

template <GgmlType T, int NT, int U, bool P>
__global__ void __launch_bounds__(kQ8Threads) mmvq_multi_kernel(const MultiArgs m, const int8_t* __restrict__ xq,
                                                                const float* __restrict__ xd, int64_t ne0, int n_tok) {
    pdl_begin();
    int mi = 0;
    while (mi + 1 < m.n && static_cast<int>(blockIdx.x) >= m.first_block[mi + 1]) ++mi;
    const int r = (static_cast<int>(blockIdx.x) - m.first_block[mi]) * kQ8Rows + threadIdx.x / kWarp;
    if (r >= m.n_rows[mi]) return;
    const int t0 = blockIdx.y * NT;
    const int nt = min(NT, n_tok - t0);
    float acc[NT];
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[t] = 0.f;
    row_dot<T, NT, U, P>(m.W[mi] + static_cast<size_t>(r) * m.row_bytes[mi], static_cast<int>(ne0 / 16), xq + t0 * ne0,
                         xd + t0 * (ne0 / 32), ne0, nt, acc);
    const float* bias = m.bias[mi];
#pragma unroll
    for (int t = 0; t < NT; ++t) {
        const float v = warp_sum(acc[t]);
        if (threadIdx.x % kWarp == 0 && t < nt) m.out[mi][(t0 + t) * m.ldo[mi] + r] = v + (bias ? bias[r] : 0.f);
    }
}

template <GgmlType T, int NT>
void launch_mmvq_multi(cudaStream_t s, std::span<const MatmulTo> outs, const Q8Acts& x, int64_t n_tok) {
    MultiArgs m{};
    m.n = static_cast<int>(outs.size());
    for (int i = 0; i < m.n; ++i) {
        const MatmulTo& o = outs[static_cast<size_t>(i)];
        m.W[i] = o.w->data;
        m.row_bytes[i] = o.w->row_bytes;
        m.n_rows[i] = static_cast<int>(o.w->n_rows);
        m.out[i] = o.out;
        m.ldo[i] = o.ldo;
        m.bias[i] = o.bias;
        m.first_block[i + 1] = m.first_block[i] + ceil_div(o.w->n_rows, kQ8Rows);
    }
    const dim3 grid(static_cast<unsigned>(m.first_block[m.n]), ceil_div(n_tok, NT));
    auto go = [&]<int U>() {
        with_pairs<T>([&]<bool P>() {
            launch_pdl(s, grid, kQ8Threads, 0, mmvq_multi_kernel<T, NT, U, P>, m, x.q, x.d, x.ne0, static_cast<int>(n_tok));
        });
    };
    if constexpr (NT == 1) with_chunks<2>(go);  // (the knob is for decode steps: one token)
    else go.template operator()<2>();
    NITRO_CUDA_LAUNCH_CHECK();
}

template <GgmlType T, int NT>
void launch_mmvq(cudaStream_t s, const DWeight& w, const Q8Acts& x, int64_t n_tok, float* out, int64_t ldo,
                 const float* bias, bool acc) {
    const dim3 grid(ceil_div(w.n_rows, kQ8Rows), ceil_div(n_tok, NT));
    auto go = [&]<int U>() {
        with_pairs<T>([&]<bool P>() {
            launch_pdl(s, grid, kQ8Threads, 0, mmvq_kernel<T, NT, U, P>, w.data, w.row_bytes, static_cast<int>(w.n_rows),
                       x.q, x.d, x.ne0, static_cast<int>(n_tok), out, ldo, bias, acc ? 1 : 0);
        });
    };
    if constexpr (NT == 1) with_chunks<2>(go);  // (the knob is for decode steps: one token)
    else go.template operator()<2>();
    NITRO_CUDA_LAUNCH_CHECK();
}

/// Gate and up rows f of pair r = t*K + j (expert ids[r], from its slot) -> act[r, f]. U: chunks of
/// each of the two rows loaded per lane before they are multiplied (2U loads in flight), summed in
/// lane_chunks' order whatever U is (the same bits).
template <GgmlType T, int U, bool P>
__global__ void __launch_bounds__(kQ8Threads)
    moe_gateup_q8_kernel(const uint8_t* __restrict__ gate, const uint8_t* __restrict__ up, size_t gstride, size_t ustride,
                         size_t row_bytes, int F, const int32_t* __restrict__ ids, const int32_t* __restrict__ slot_of,
                         int K, const int8_t* __restrict__ xq, const float* __restrict__ xd, int64_t E,
                         const float* __restrict__ gb, const float* __restrict__ ub, int oai, float* __restrict__ act) {
    pdl_begin();
    const int f = blockIdx.x * kQ8Rows + threadIdx.x / kWarp;
    const int r = blockIdx.y;
    if (f >= F) return;
    const int e = ids[r];
    const int slot = slot_of[e];
    if (slot < 0) return;
    const int8_t* q = xq + (r / K) * E;
    const float* d = xd + (r / K) * (E / 32);
    const uint8_t* gr = gate + slot * gstride + static_cast<size_t>(f) * row_bytes;
    const uint8_t* ur = up + slot * ustride + static_cast<size_t>(f) * row_bytes;
    const int n_chunks = static_cast<int>(E / 16);
    float a[2] = {0.f, 0.f};  // gate, up
    const uint8_t* const rows[2] = {gr, ur};
    lane_chunks<T, U, P>(rows, n_chunks, [&](int m, const Chunk& k, int c) { a[m] += dot_chunk<T>(k, c, q, d); });
    float ag = warp_sum(a[0]), au = warp_sum(a[1]);
    if (threadIdx.x % kWarp == 0) {
        if (gb) ag += gb[static_cast<int64_t>(e) * F + f];
        if (ub) au += ub[static_cast<int64_t>(e) * F + f];
        act[static_cast<int64_t>(r) * F + f] = glu(ag, au, oai);
    }
}

/// Down row c of pair r (from its expert's slot) -> out[r, c] (no bias: moe_combine adds it).
template <GgmlType T, int U, bool P>
__global__ void __launch_bounds__(kQ8Threads)
    moe_down_q8_kernel(const uint8_t* __restrict__ down, size_t dstride, size_t row_bytes, int E,
                       const int32_t* __restrict__ ids, const int32_t* __restrict__ slot_of, const int8_t* __restrict__ xq,
                       const float* __restrict__ xd, int64_t F, float* __restrict__ out) {
    pdl_begin();
    const int c = blockIdx.x * kQ8Rows + threadIdx.x / kWarp;
    const int r = blockIdx.y;
    if (c >= E) return;
    const int slot = slot_of[ids[r]];
    if (slot < 0) return;
    float acc[1] = {0.f};
    row_dot<T, 1, U, P>(down + slot * dstride + static_cast<size_t>(c) * row_bytes, static_cast<int>(F / 16), xq + r * F,
                        xd + r * (F / 32), F, 1, acc);
    const float v = warp_sum(acc[0]);
    if (threadIdx.x % kWarp == 0) out[static_cast<int64_t>(r) * E + c] = v;
}

/// Pairs of one token whose down rows a warp of moe_down_combine_q8_kernel loads together.
constexpr int kDownBatch = 4;

/// moe_down_combine_q8 (mmvq.h): grid (ceil(E / 8), n), warp w of a CTA takes column c =
/// blockIdx.x * 8 + w of token t = blockIdx.y and the down rows of t's K pairs, kDownBatch at a
/// time (one unit of each in flight per lane, lane_chunks). Each row's sum has moe_down_q8_kernel's
/// lanes and order (the same value); lane 0 then sums them as moe_combine_kernel does.
template <GgmlType T, int U, bool P>
__global__ void __launch_bounds__(kQ8Threads)
    moe_down_combine_q8_kernel(const uint8_t* __restrict__ down, size_t dstride, size_t row_bytes, int E,
                               const int32_t* __restrict__ ids, const int32_t* __restrict__ slot_of,
                               const int8_t* __restrict__ xq, const float* __restrict__ xd, int64_t F, int K,
                               const float* __restrict__ w, const float* __restrict__ down_b,
                               const float* __restrict__ partial, float* __restrict__ x) {
    pdl_begin();
    __shared__ float sv[kQ8Rows][kMaxFusedDownK];  // [warp, pair]: the pairs' down rows at column c
    const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
    const int c = blockIdx.x * kQ8Rows + warp;
    const int t = blockIdx.y;
    if (c >= E) return;  // (no block-wide synchronisation below)
    const int n_chunks = static_cast<int>(F / 16);
    for (int j0 = 0; j0 < K; j0 += kDownBatch) {
        const uint8_t* rows[kDownBatch];
        int64_t pr[kDownBatch];  // the pair whose activations row i takes
        bool use[kDownBatch];
        int first = -1;
#pragma unroll
        for (int i = 0; i < kDownBatch; ++i) {
            const int j = j0 + i;
            const int slot = j < K ? slot_of[ids[t * K + j]] : -1;  // (the same for the whole warp)
            use[i] = slot >= 0;
            rows[i] = down + (use[i] ? slot : 0) * dstride + static_cast<size_t>(c) * row_bytes;
            pr[i] = static_cast<int64_t>(t) * K + j;
            if (use[i] && first < 0) first = i;
        }
        if (first < 0) continue;
#pragma unroll
        for (int i = 0; i < kDownBatch; ++i)
            if (!use[i]) rows[i] = rows[first], pr[i] = pr[first];  // rows that exist, loaded and not used
        float acc[kDownBatch] = {};
        lane_chunks<T, U, P>(rows, n_chunks, [&](int i, const Chunk& k, int ch) {
            acc[i] += dot_chunk<T>(k, ch, xq + pr[i] * F, xd + pr[i] * (F / 32));
        });
#pragma unroll
        for (int i = 0; i < kDownBatch; ++i) {
            const float v = warp_sum(acc[i]);
            if (lane == 0 && use[i]) sv[warp][j0 + i] = v;
        }
    }
    if (lane != 0) return;
    float a = 0.f;  // moe_combine_kernel's sum, in router order
    for (int j = 0; j < K; ++j) {
        const int r = t * K + j;
        const int e = ids[r];
        if (slot_of[e] < 0) continue;
        float d = sv[warp][j];
        if (down_b) d += down_b[static_cast<int64_t>(e) * E + c];
        a = fmaf(w[r], d, a);
    }
    float* xp = x + static_cast<int64_t>(t) * E + c;
    float v = *xp + a;
    if (partial) v += partial[static_cast<int64_t>(t) * E + c];
    *xp = v;
}

}  // namespace

void set_mmvq_chunks(int n) {
    if (n != 0 && n != 1 && n != 2 && n != 4) cfail("CUDA mmvq: {} chunks in flight per lane (0, 1, 2 or 4)", n);
    g_chunks.store(n);
}

int mmvq_chunks() {
    int n = g_chunks.load();
    if (n >= 0) return n;
    const char* e = std::getenv("NITRO_MMVQ_CHUNKS");
    n = e && *e ? std::atoi(e) : 0;
    if (n != 0 && n != 1 && n != 2 && n != 4) cfail("NITRO_MMVQ_CHUNKS={}: 0, 1, 2 or 4 chunks in flight per lane", e);
    g_chunks.store(n);
    return n;
}

void set_mmvq_pairs(bool on) { g_pairs.store(on ? 1 : 0); }

bool mmvq_pairs() {
    int v = g_pairs.load();
    if (v >= 0) return v != 0;
    const char* e = std::getenv("NITRO_MMVQ_PAIRS");
    if (e && *e && std::strcmp(e, "0") != 0 && std::strcmp(e, "1") != 0)
        cfail("NITRO_MMVQ_PAIRS={}: 1 (units of two chunks for Q4_K / Q5_K, the default) or 0", e);
    v = e && *e ? std::atoi(e) : 1;
    g_pairs.store(v);
    return v != 0;
}

bool q8_supported(GgmlType t) {
    switch (t) {
        case GgmlType::Q8_0: case GgmlType::Q4_0: case GgmlType::MXFP4: case GgmlType::Q4_K: case GgmlType::Q5_K:
        case GgmlType::Q6_K: case GgmlType::IQ4_XS: return true;
        default: return false;
    }
}

Q8Acts quantize_q8_part(cudaStream_t s, GgmlType weight, const float* x, int64_t ldx, int64_t row0, int64_t rows,
                        int64_t total_rows, int64_t ne0, void* buf, size_t buf_bytes) {
    const GgmlType vdt = cpu::vec_dot_type(weight);
    if (vdt != GgmlType::Q8_0 && vdt != GgmlType::Q8_K)
        cfail("CUDA quantize_q8: {} weights take {} activations, not 8-bit blocks", type_display_name(weight),
              type_display_name(vdt));
    const int64_t block = vdt == GgmlType::Q8_K ? 256 : 32;
    if (ne0 % block != 0) cfail("CUDA quantize_q8: rows of {} values are not whole {} blocks", ne0, type_display_name(vdt));
    if (row0 < 0 || rows < 0 || row0 + rows > total_rows)
        cfail("CUDA quantize_q8: rows [{}, {}) are outside a layout of {} rows", row0, row0 + rows, total_rows);
    const uint64_t need = q8_act_bytes(total_rows, ne0);
    if (need > buf_bytes)
        cfail("CUDA quantize_q8: {} rows of {} values need {} bytes of scratch, {} given", total_rows, ne0, need, buf_bytes);
    const Q8Acts a = q8_acts_view(buf, total_rows, ne0);
    if (rows <= 0) return a;
    const dim3 grid(ceil_div(ne0, 256), static_cast<unsigned>(rows));
    int8_t* qp = static_cast<int8_t*>(buf) + row0 * ne0;
    float* dp = const_cast<float*>(a.d) + row0 * (ne0 / 32);
    if (vdt == GgmlType::Q8_0)
        launch_pdl(s, grid, 256, 0, quantize_q8_kernel<GgmlType::Q8_0>, x, ldx, ne0, qp, dp);
    else
        launch_pdl(s, grid, 256, 0, quantize_q8_kernel<GgmlType::Q8_K>, x, ldx, ne0, qp, dp);
    NITRO_CUDA_LAUNCH_CHECK();
    return a;
}

Q8Acts quantize_q8(cudaStream_t s, GgmlType weight, const float* x, int64_t ldx, int64_t rows, int64_t ne0, void* buf,
                   size_t buf_bytes) {
    return quantize_q8_part(s, weight, x, ldx, 0, rows, rows, ne0, buf, buf_bytes);
}

void mmvq(cudaStream_t s, const DWeight& w, const Q8Acts& x, int64_t n_tok, float* out, int64_t ldo, const float* bias,
          bool accumulate) {
    NITRO_CUDA_ASSERT(x.ne0 == w.ne0 && n_tok <= kGemvMaxTokens);
    const bool ok = dispatch_q8_type(w.type, [&]<GgmlType T>() {
        if (n_tok == 1) launch_mmvq<T, 1>(s, w, x, n_tok, out, ldo, bias, accumulate);
        else if (n_tok == 2) launch_mmvq<T, 2>(s, w, x, n_tok, out, ldo, bias, accumulate);
        else if (n_tok <= 4) launch_mmvq<T, 4>(s, w, x, n_tok, out, ldo, bias, accumulate);
        else launch_mmvq<T, 8>(s, w, x, n_tok, out, ldo, bias, accumulate);
    });
    if (!ok) cfail("CUDA mmvq: weight type {} has no integer decode path", type_display_name(w.type));
}

void mmvq_multi(cudaStream_t s, std::span<const MatmulTo> outs, const Q8Acts& x, int64_t n_tok) {
    if (outs.empty()) return;
    const GgmlType t = outs[0].w->type;
    NITRO_CUDA_ASSERT(outs.size() <= static_cast<size_t>(kMaxMulti) && n_tok <= kGemvMaxTokens);
    for (const MatmulTo& o : outs) NITRO_CUDA_ASSERT(o.w->type == t && o.w->ne0 == x.ne0);
    const bool ok = dispatch_q8_type(t, [&]<GgmlType T>() {
        if (n_tok == 1) launch_mmvq_multi<T, 1>(s, outs, x, n_tok);
        else if (n_tok == 2) launch_mmvq_multi<T, 2>(s, outs, x, n_tok);
        else if (n_tok <= 4) launch_mmvq_multi<T, 4>(s, outs, x, n_tok);
        else launch_mmvq_multi<T, 8>(s, outs, x, n_tok);
    });
    if (!ok) cfail("CUDA mmvq: weight type {} has no integer decode path", type_display_name(t));
}

size_t moe_decode_q8_bytes(int64_t n, int64_t E, int K, int64_t F) {
    return std::max(q8_act_bytes(n, E), q8_act_bytes(n * K, F));
}

void moe_decode_q8(cudaStream_t s, const ExpertSlots& ex, const float* h, int64_t n, int64_t E, int K, const int32_t* ids,
                   MoeScratch& sc, const Q8Input* hq) {
    const int64_t F = ex.gate.n_rows, R = n * K;
    void* buf = sc.gemm.xr;
    const size_t bytes = sc.gemm.xr_elems * sizeof(float);
    const Q8Acts* ready = q8_ready(hq, h, E, n, ex.gate.type);  // quantized by the norm that made h
    const Q8Acts hx = ready ? *ready : quantize_q8(s, ex.gate.type, h, E, n, E, buf, bytes);
    bool ok = dispatch_q8_type(ex.gate.type, [&]<GgmlType T>() {
        with_chunks<1>([&]<int U>() {
            with_pairs<T>([&]<bool P>() {
                launch_pdl(s, dim3(ceil_div(F, kQ8Rows), static_cast<unsigned>(R)), kQ8Threads, 0,
                           moe_gateup_q8_kernel<T, U, P>, ex.gate.data, ex.up.data, ex.gate_stride, ex.up_stride,
                           ex.gate.row_bytes, static_cast<int>(F), ids, ex.slot_of, K, hx.q, hx.d, E, ex.gate_b, ex.up_b,
                           ex.oai_act ? 1 : 0, sc.act);
            });
        });
    });
    NITRO_CUDA_LAUNCH_CHECK();
    // h's 8-bit copy is no longer read (stream order): the activations take its place
    const Q8Acts ax = quantize_q8(s, ex.down.type, sc.act, F, R, F, buf, bytes);
    if (sc.fuse_down && K <= kMaxFusedDownK && ok && q8_supported(ex.down.type)) {
        sc.pending_q = ax.q;  // moe_combine runs the down product (moe_down_combine_q8)
        sc.pending_d = ax.d;
        return;
    }
    ok = ok && dispatch_q8_type(ex.down.type, [&]<GgmlType T>() {
             with_chunks<2>([&]<int U>() {
                 with_pairs<T>([&]<bool P>() {
                     launch_pdl(s, dim3(ceil_div(E, kQ8Rows), static_cast<unsigned>(R)), kQ8Threads, 0,
                                moe_down_q8_kernel<T, U, P>, ex.down.data, ex.down_stride, ex.down.row_bytes,
                                static_cast<int>(E), ids, ex.slot_of, ax.q, ax.d, F, sc.down);
                 });
             });
         });
    if (!ok)
        cfail("CUDA moe_decode_q8: expert types {} / {} have no integer decode path", type_display_name(ex.gate.type),
              type_display_name(ex.down.type));
    NITRO_CUDA_LAUNCH_CHECK();
}

}  // namespace nitro::cuda

namespace nitro::cuda {

void moe_down_combine_q8(cudaStream_t s, const ExpertSlots& ex, int64_t n, int64_t E, int K, const int32_t* ids,
                         const float* w, const Q8Acts& act, const float* partial, float* x) {
    NITRO_CUDA_ASSERT(n <= kGemvMaxTokens && K >= 1 && K <= kMaxFusedDownK && act.ne0 == ex.down.ne0);
    if (n <= 0) return;
    const bool ok = dispatch_q8_type(ex.down.type, [&]<GgmlType T>() {
        with_chunks<1>([&]<int U>() {
            with_pairs<T>([&]<bool P>() {
                launch_pdl(s, dim3(ceil_div(E, kQ8Rows), static_cast<unsigned>(n)), kQ8Threads, 0,
                           moe_down_combine_q8_kernel<T, U, P>, ex.down.data, ex.down_stride, ex.down.row_bytes,
                           static_cast<int>(E), ids, ex.slot_of, act.q, act.d, ex.down.ne0, K, w, ex.down_b, partial, x);
            });
        });
    });
    if (!ok) cfail("CUDA moe_down_combine_q8: expert type {} has no integer decode path", type_display_name(ex.down.type));
    NITRO_CUDA_LAUNCH_CHECK();
}

}  // namespace nitro::cuda
