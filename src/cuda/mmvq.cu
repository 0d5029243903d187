// Integer decode products (mmvq.h): the 8-bit activation quantizer, the matrix-vector kernel and
// the decode MoE's gate/up and down kernels. One warp per output row; each lane takes the row's
// 16-value chunks lane, lane + 32, ... (q8dot.cuh), two at a time so two loads are in flight, and
// the warp sums its lanes at the end.
#include "cuda/mmvq.h"

#include "cpu/matmul.h"
#include "cuda/common.cuh"
#include "cuda/pdl.cuh"
#include "cuda/q8dot.cuh"
#include "runtime/placement.h"

#include <atomic>
#include <cstdlib>
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

/// Sum over this lane's chunks of one weight row, for NT tokens: U chunks loaded before they are
/// multiplied (U loads in flight per lane), summed in chunk order (c, c + 32, ...) whatever U is,
/// so every U gives the same bits.
template <GgmlType T, int NT, int U>
__device__ __forceinline__ void row_dot(const uint8_t* __restrict__ row, int n_chunks, const int8_t* __restrict__ xq,
                                        const float* __restrict__ xd, int64_t ne0, int nt, float (&acc)[NT]) {
    const int64_t nb = ne0 / 32;
    auto consume = [&](const Chunk& k, int c) {
#pragma unroll
        for (int t = 0; t < NT; ++t)
            if (t < nt) acc[t] += dot_chunk<T>(k, c, xq + t * ne0, xd + t * nb);
    };
    int c = threadIdx.x % kWarp;
    for (; c + (U - 1) * kWarp < n_chunks; c += U * kWarp) {
        Chunk k[U];
#pragma unroll
        for (int u = 0; u < U; ++u) Q8Dot<T>::load(row, c + u * kWarp, k[u]);
#pragma unroll
        for (int u = 0; u < U; ++u) consume(k[u], c + u * kWarp);
    }
    for (; c < n_chunks; c += kWarp) {
        Chunk k0;
        Q8Dot<T>::load(row, c, k0);
        consume(k0, c);
    }
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

template <GgmlType T, int NT, int U>
__global__ void __launch_bounds__(kQ8Threads) mmvq_kernel(const uint8_t* __restrict__ W, size_t row_bytes, int n_rows,
                                                          const int8_t* __restrict__ xq, const float* __restrict__ xd,
                                                          int64_t ne0, int n_tok, float* __restrict__ out, int64_t ldo,
                                                          const float* __restrict__ bias, int accumulate) {
    pdl_begin();
    const int r = blockIdx.x * kQ8Rows + threadIdx.x / kWarp;
    if (r >= n_rows) return;
    const int t0 = blockIdx.y * NT;
    const int nt = min(NT, n_tok - t0);
    float acc[NT];
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[t] = 0.f;
    row_dot<T, NT, U>(W + static_cast<size_t>(r) * row_bytes, static_cast<int>(ne0 / 16), xq + t0 * ne0, xd + t0 * (ne0 / 32),
                   ne0, nt, acc);
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

template <GgmlType T, int NT, int U>
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
    row_dot<T, NT, U>(m.W[mi] + static_cast<size_t>(r) * m.row_bytes[mi], static_cast<int>(ne0 / 16), xq + t0 * ne0,
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
        launch_pdl(s, grid, kQ8Threads, 0, mmvq_multi_kernel<T, NT, U>, m, x.q, x.d, x.ne0, static_cast<int>(n_tok));
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
        launch_pdl(s, grid, kQ8Threads, 0, mmvq_kernel<T, NT, U>, w.data, w.row_bytes, static_cast<int>(w.n_rows), x.q, x.d,
                   x.ne0, static_cast<int>(n_tok), out, ldo, bias, acc ? 1 : 0);
    };
    if constexpr (NT == 1) with_chunks<2>(go);  // (the knob is for decode steps: one token)
    else go.template operator()<2>();
    NITRO_CUDA_LAUNCH_CHECK();
}

/// Gate and up rows f of pair r = t*K + j (expert ids[r], from its slot) -> act[r, f]. U: chunks of
/// each of the two rows loaded per lane before they are multiplied (2U loads in flight), summed in
/// chunk order whatever U is (the same bits).
template <GgmlType T, int U>
__global__ void __launch_bounds__(kQ8Threads) moe_gateup_q8_kernel(
    const uint8_t* __restrict__ gate, const uint8_t* __restrict__ up, size_t gstride, size_t ustride, size_t row_bytes,
    int F, const int32_t* __restrict__ ids, const int32_t* __restrict__ slot_of, int K, const int8_t* __restrict__ xq,
    const float* __restrict__ xd, int64_t E, const float* __restrict__ gb, const float* __restrict__ ub, int oai,
    float* __restrict__ act) {
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
    float ag = 0.f, au = 0.f;
    int c = threadIdx.x % kWarp;
    for (; c + (U - 1) * kWarp < n_chunks; c += U * kWarp) {
        Chunk kg[U], ku[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            Q8Dot<T>::load(gr, c + u * kWarp, kg[u]);
            Q8Dot<T>::load(ur, c + u * kWarp, ku[u]);
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            ag += dot_chunk<T>(kg[u], c + u * kWarp, q, d);
            au += dot_chunk<T>(ku[u], c + u * kWarp, q, d);
        }
    }
    for (; c < n_chunks; c += kWarp) {
        Chunk kg, ku;
        Q8Dot<T>::load(gr, c, kg);
        Q8Dot<T>::load(ur, c, ku);
        ag += dot_chunk<T>(kg, c, q, d);
        au += dot_chunk<T>(ku, c, q, d);
    }
    ag = warp_sum(ag);
    au = warp_sum(au);
    if (threadIdx.x % kWarp == 0) {
        if (gb) ag += gb[static_cast<int64_t>(e) * F + f];
        if (ub) au += ub[static_cast<int64_t>(e) * F + f];
        act[static_cast<int64_t>(r) * F + f] = glu(ag, au, oai);
    }
}

/// Down row c of pair r (from its expert's slot) -> out[r, c] (no bias: moe_combine adds it).
template <GgmlType T, int U>
__global__ void __launch_bounds__(kQ8Threads) moe_down_q8_kernel(const uint8_t* __restrict__ down, size_t dstride,
                                                                 size_t row_bytes, int E, const int32_t* __restrict__ ids,
                                                                 const int32_t* __restrict__ slot_of,
                                                                 const int8_t* __restrict__ xq,
                                                                 const float* __restrict__ xd, int64_t F,
                                                                 float* __restrict__ out) {
    pdl_begin();
    const int c = blockIdx.x * kQ8Rows + threadIdx.x / kWarp;
    const int r = blockIdx.y;
    if (c >= E) return;
    const int slot = slot_of[ids[r]];
    if (slot < 0) return;
    float acc[1] = {0.f};
    row_dot<T, 1, U>(down + slot * dstride + static_cast<size_t>(c) * row_bytes, static_cast<int>(F / 16), xq + r * F,
                     xd + r * (F / 32), F, 1, acc);
    const float v = warp_sum(acc[0]);
    if (threadIdx.x % kWarp == 0) out[static_cast<int64_t>(r) * E + c] = v;
}

/// moe_down_combine_q8 (mmvq.h): grid (ceil(E / cpb), n), cpb = kQ8Rows / wpc columns per CTA, wpc
/// warps per column; warp w takes column c = blockIdx.x * cpb + w / wpc and the pairs j = w % wpc,
/// + wpc, ... of token t = blockIdx.y. A pair's down row is moe_down_q8_kernel's (row_dot, warp_sum
/// with the same lanes: the same value); one lane per column then sums them as moe_combine_kernel.
template <GgmlType T, int U>
__global__ void __launch_bounds__(kQ8Threads) moe_down_combine_q8_kernel(
    const uint8_t* __restrict__ down, size_t dstride, size_t row_bytes, int E, const int32_t* __restrict__ ids,
    const int32_t* __restrict__ slot_of, const int8_t* __restrict__ xq, const float* __restrict__ xd, int64_t F, int K,
    int wpc, const float* __restrict__ w, const float* __restrict__ down_b, const float* __restrict__ partial,
    float* __restrict__ x) {
    pdl_begin();
    __shared__ float sv[kMaxFusedDownK];  // [cpb, K]: cpb * K <= max(kQ8Rows, K) <= kMaxFusedDownK
    const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
    const int cl = warp / wpc, jw = warp % wpc;
    const int c = blockIdx.x * (kQ8Rows / wpc) + cl;
    const int t = blockIdx.y;
    if (c < E) {
        for (int j = jw; j < K; j += wpc) {
            const int r = t * K + j;
            const int slot = slot_of[ids[r]];
            if (slot < 0) continue;  // (the same for the whole warp)
            float acc[1] = {0.f};
            row_dot<T, 1, U>(down + slot * dstride + static_cast<size_t>(c) * row_bytes, static_cast<int>(F / 16), xq + r * F,
                          xd + r * (F / 32), F, 1, acc);
            const float v = warp_sum(acc[0]);
            if (lane == 0) sv[cl * K + j] = v;
        }
    }
    __syncthreads();
    if (c >= E || jw != 0 || lane != 0) return;
    float a = 0.f;  // moe_combine_kernel's sum, in router order
    for (int j = 0; j < K; ++j) {
        const int r = t * K + j;
        const int e = ids[r];
        if (slot_of[e] < 0) continue;
        float d = sv[cl * K + j];
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
            launch_pdl(s, dim3(ceil_div(F, kQ8Rows), static_cast<unsigned>(R)), kQ8Threads, 0, moe_gateup_q8_kernel<T, U>,
                       ex.gate.data, ex.up.data, ex.gate_stride, ex.up_stride, ex.gate.row_bytes, static_cast<int>(F), ids,
                       ex.slot_of, K, hx.q, hx.d, E, ex.gate_b, ex.up_b, ex.oai_act ? 1 : 0, sc.act);
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
                 launch_pdl(s, dim3(ceil_div(E, kQ8Rows), static_cast<unsigned>(R)), kQ8Threads, 0, moe_down_q8_kernel<T, U>,
                            ex.down.data, ex.down_stride, ex.down.row_bytes, static_cast<int>(E), ids, ex.slot_of, ax.q,
                            ax.d, F, sc.down);
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
    int wpc = 1;  // warps per column: K rounded up to a power of 2, at most the CTA's 8
    while (wpc < K && wpc < kQ8Rows) wpc *= 2;
    const int cpb = kQ8Rows / wpc;
    const bool ok = dispatch_q8_type(ex.down.type, [&]<GgmlType T>() {
        with_chunks<2>([&]<int U>() {
            launch_pdl(s, dim3(ceil_div(E, cpb), static_cast<unsigned>(n)), kQ8Threads, 0, moe_down_combine_q8_kernel<T, U>,
                       ex.down.data, ex.down_stride, ex.down.row_bytes, static_cast<int>(E), ids, ex.slot_of, act.q, act.d,
                       ex.down.ne0, K, wpc, w, ex.down_b, partial, x);
        });
    });
    if (!ok) cfail("CUDA moe_down_combine_q8: expert type {} has no integer decode path", type_display_name(ex.down.type));
    NITRO_CUDA_LAUNCH_CHECK();
}

}  // namespace nitro::cuda
