// Integer dot products of ggml weight blocks with 8-bit activations, 16 weights at a time (a
// "chunk"), for the decode kernels of src/cuda/mmvq.cu (llama.cpp's MMVQ class: activations
// quantized once per product to 8-bit blocks, weights unpacked to int8 lanes in registers,
// __dp4a for four multiply-adds per instruction).
//
// Chunk c of a row holds half of the row's 32-value sub-block sb = c / 2 (h = c % 2):
//   - contiguous types (Q8_0, Q4_K, Q5_K, Q6_K): values 32*sb + 16*h + [0, 16);
//   - split types (Q4_0, MXFP4, IQ4_XS, whose bytes hold value j in the low nibble and value
//     j + 16 in the high one): values 32*sb + 8*h + [0, 8) (lanes q[0], q[1]) and
//     32*sb + 16 + 8*h + [0, 8) (lanes q[2], q[3]).
// A chunk's weight values are d * q_i - m (m = 0 except for Q4_K / Q5_K), with q_i the int8 lanes;
// so against activations dx * qx_i the chunk's dot product is dx * (d * sum(q * qx) - m * sum(qx)),
// the integer sums exact. This is the arithmetic of the CPU engine's vec-dot kernels (and of
// ggml's): integer sums per block, scaled in f32; only the f32 summation order differs.
#pragma once

#include "cuda/quant.cuh"

#include <cstdint>

namespace nitro::cuda {

// The chunk decoders are __host__ __device__ so a GPU-less test (tests/cuda/test_q8dot.cu) can
// check them against src/quant on the CPU; these wrappers are the intrinsics on the device and
// their definitions (CUDA math API) on the host.
#define NITRO_HD __host__ __device__ __forceinline__
#ifdef __CUDA_ARCH__
#define NITRO_Q8_UNROLL _Pragma("unroll")
#else
#define NITRO_Q8_UNROLL
#endif
NITRO_HD uint32_t q8_ld32(const uint32_t* p) {
#ifdef __CUDA_ARCH__
    return __ldg(p);
#else
    return *p;
#endif
}
NITRO_HD uint8_t q8_ld8(const uint8_t* p) {
#ifdef __CUDA_ARCH__
    return __ldg(p);
#else
    return *p;
#endif
}
/// (hi:lo) >> sh, the low 32 bits (sh < 32).
NITRO_HD uint32_t q8_fshr(uint32_t lo, uint32_t hi, unsigned sh) {
#ifdef __CUDA_ARCH__
    return __funnelshift_r(lo, hi, sh);
#else
    return static_cast<uint32_t>(((static_cast<uint64_t>(hi) << 32) | lo) >> sh);
#endif
}
/// Byte n of the result = byte (selector nibble n, 0-7) of the 8 bytes (b:a); nibbles 0-3 of s.
NITRO_HD uint32_t q8_prmt(uint32_t a, uint32_t b, uint32_t s) {
#ifdef __CUDA_ARCH__
    return __byte_perm(a, b, s);
#else
    const uint64_t v = (static_cast<uint64_t>(b) << 32) | a;
    uint32_t r = 0;
    for (int n = 0; n < 4; ++n) r |= static_cast<uint32_t>((v >> (8 * ((s >> (4 * n)) & 7))) & 0xFF) << (8 * n);
    return r;
#endif
}
/// Bytewise a - b, modulo 256 per byte.
NITRO_HD uint32_t q8_vsub4(uint32_t a, uint32_t b) {
#ifdef __CUDA_ARCH__
    return __vsub4(a, b);
#else
    uint32_t r = 0;
    for (int n = 0; n < 4; ++n) r |= (((a >> (8 * n)) - (b >> (8 * n))) & 0xFFu) << (8 * n);
    return r;
#endif
}
/// c + the dot product of a's and b's four int8 bytes.
NITRO_HD int q8_dp4a(int a, int b, int c) {
#ifdef __CUDA_ARCH__
    return __dp4a(a, b, c);
#else
    for (int n = 0; n < 4; ++n) c += static_cast<int8_t>(a >> (8 * n)) * static_cast<int8_t>(b >> (8 * n));
    return c;
#endif
}
template <typename V>
NITRO_HD V q8_ldv(const V* p) {
#ifdef __CUDA_ARCH__
    return __ldg(p);
#else
    return *p;
#endif
}
NITRO_HD float q8_fmul(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}

/// 16 weights of one chunk as int8 lanes, and their scale and offset (value = d * q - m).
struct Chunk {
    int q[4];
    float d, m;
};

/// N little-endian 32-bit words from any byte address, by aligned 4-byte loads and funnel shifts
/// (blocks of 17, 18, 34 and 210 bytes leave rows and blocks unaligned). Reads no byte outside
/// the words that hold [p, p + 4N).
template <int N>
NITRO_HD void ld_words(const uint8_t* p, uint32_t (&w)[N]) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    const uint32_t* b = reinterpret_cast<const uint32_t*>(a & ~static_cast<uintptr_t>(3));
    const unsigned sh = static_cast<unsigned>(a & 3) * 8;
    uint32_t v[N + 1];
NITRO_Q8_UNROLL
    for (int i = 0; i < N; ++i) v[i] = q8_ld32(b + i);
    v[N] = sh ? q8_ld32(b + N) : 0u;
NITRO_Q8_UNROLL
    for (int i = 0; i < N; ++i) w[i] = q8_fshr(v[i], v[i + 1], sh);
}

/// 16 bytes from p: one 16-byte load on the device where p is 16-byte aligned, else ld_words<4>.
NITRO_HD void ld_words16(const uint8_t* p, uint32_t (&w)[4]) {
#ifdef __CUDA_ARCH__
    if ((reinterpret_cast<uintptr_t>(p) & 15) == 0) {
        const uint4 v = __ldg(reinterpret_cast<const uint4*>(p));
        w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
        return;
    }
#endif
    ld_words<4>(p, w);
}

/// The fp16 in bits [16 * hi, 16 * hi + 16) of w, as f32.
NITRO_HD float half_of(uint32_t w, int hi) {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(hi ? w >> 16 : w & 0xFFFFu)));
}

/// scale_min_k4 (ggml's get_scale_min_k4) of sub-block j from the 12 scale bytes of a Q4_K / Q5_K
/// super-block held as three little-endian words (bytes 0-3, 4-7, 8-11): the same sc and m.
NITRO_HD void scale_min_k4_w(int j, uint32_t s0, uint32_t s1, uint32_t s2, int& sc, int& m) {
    const int k = 8 * (j & 3);
    const int a = static_cast<int>((s0 >> k) & 0xFF), b = static_cast<int>((s1 >> k) & 0xFF),
              c = static_cast<int>((s2 >> k) & 0xFF);
    if (j < 4) {
        sc = a & 63;
        m = b & 63;
    } else {
        sc = (c & 0xF) | ((a >> 6) << 4);
        m = (c >> 4) | ((b >> 6) << 4);
    }
}

/// A 16-entry int8 table as four words (bytes 0-3, 4-7, 8-11, 12-15).
struct Lut16 {
    uint32_t t0, t1, t2, t3;
};
/// Four indices (one per byte of v, each < 16) looked up in the table: three byte permutes. The
/// first two pick from entries 0-7 and 8-15 with the index's low three bits; the third keeps, per
/// byte, the one that bit 3 asks for.
NITRO_HD int lut16(uint32_t v, const Lut16& t) {
    const uint32_t x = v | (v >> 4);                         // index k of byte k in nibble k (bits 4k..4k+3)
    const uint32_t sel = (x & 0xFFu) | ((x >> 8) & 0xFF00u);
    const uint32_t lo = q8_prmt(t.t0, t.t1, sel & 0x7777u);
    const uint32_t hi = q8_prmt(t.t2, t.t3, sel & 0x7777u);
    return static_cast<int>(q8_prmt(lo, hi, 0x3210u | ((sel & 0x8888u) >> 1)));
}
// kvalues_mxfp4 (ggml-common.h): 0 1 2 3 4 6 8 12 | 0 -1 -2 -3 -4 -6 -8 -12 (twice the e2m1 values;
// e8m0_half halves the scale to match).
NITRO_HD Lut16 lut_mxfp4() { return {0x03020100u, 0x0C080604u, 0xFDFEFF00u, 0xF4F8FAFCu}; }
// kvalues_iq4nl: -127 -104 -83 -65 -49 -35 -22 -10 | 1 13 25 38 53 69 89 113
NITRO_HD Lut16 lut_iq4nl() { return {0xBFAD9881u, 0xF6EADDCFu, 0x26190D01u, 0x71594535u}; }

/// The scales and mins of sub-blocks s and s + 1 of a Q4_K / Q5_K super-block whose first 16
/// bytes (d, dmin, 12 scale bytes) are hd: k.d = d * sc, k.m = dmin * m, as load computes them.
NITRO_HD void k_scales_pair(int s, const uint32_t (&hd)[4], Chunk& ka, Chunk& kb) {
    const float d = half_of(hd[0], 0), dmin = half_of(hd[0], 1);
    int sc, m;
    scale_min_k4_w(s, hd[1], hd[2], hd[3], sc, m);
    ka.d = q8_fmul(d, static_cast<float>(sc));
    ka.m = q8_fmul(dmin, static_cast<float>(m));
    scale_min_k4_w(s + 1, hd[1], hd[2], hd[3], sc, m);
    kb.d = q8_fmul(d, static_cast<float>(sc));
    kb.m = q8_fmul(dmin, static_cast<float>(m));
}

/// Chunk c of a row of type T. kSplit: which activations the lanes pair with (see the top).
template <GgmlType T> struct Q8Dot;

/// Types whose Q8Dot has load_pair(row, c, ka, kb): chunks c and c + 2 share their quant bytes. The
/// decode kernels then give each lane units of two chunks (pair_chunk).
template <GgmlType T>
inline constexpr bool kPairChunks = T == GgmlType::Q4_K || T == GgmlType::Q5_K;

/// The first chunk of unit u of a row in pairs: chunks 4 (u / 2) + u % 2 and that + 2 (the same
/// half of sub-blocks 2j and 2j + 1, j = u / 2 counted over the row's pairs of sub-blocks).
NITRO_HD int pair_chunk(int u) { return 4 * (u >> 1) + (u & 1); }

template <> struct Q8Dot<GgmlType::Q8_0> {
    static constexpr bool kSplit = false;
    NITRO_HD static void load(const uint8_t* __restrict__ row, int c, Chunk& k) {
        const uint8_t* b = row + (c >> 1) * 34;
        uint32_t w[4];
        ld_words<4>(b + 2 + 16 * (c & 1), w);
NITRO_Q8_UNROLL
        for (int i = 0; i < 4; ++i) k.q[i] = static_cast<int>(w[i]);
        k.d = d_fp16(b);
        k.m = 0.f;
    }
};

template <> struct Q8Dot<GgmlType::Q4_0> {
    static constexpr bool kSplit = true;
    NITRO_HD static void load(const uint8_t* __restrict__ row, int c, Chunk& k) {
        const uint8_t* b = row + (c >> 1) * 18;
        uint32_t w[2];
        ld_words<2>(b + 2 + 8 * (c & 1), w);
        // nibble - 8 per byte: bytes stay in 0..15 before the subtraction, so no borrow crosses bytes
NITRO_Q8_UNROLL
        for (int i = 0; i < 2; ++i) {
            k.q[i] = static_cast<int>(q8_vsub4(w[i] & 0x0F0F0F0Fu, 0x08080808u));
            k.q[i + 2] = static_cast<int>(q8_vsub4((w[i] >> 4) & 0x0F0F0F0Fu, 0x08080808u));
        }
        k.d = d_fp16(b);
        k.m = 0.f;
    }
};

template <> struct Q8Dot<GgmlType::MXFP4> {
    static constexpr bool kSplit = true;
    NITRO_HD static void load(const uint8_t* __restrict__ row, int c, Chunk& k) {
        const uint8_t* b = row + (c >> 1) * 17;
        uint32_t w[2];
        ld_words<2>(b + 1 + 8 * (c & 1), w);
        const Lut16 t = lut_mxfp4();
NITRO_Q8_UNROLL
        for (int i = 0; i < 2; ++i) {
            k.q[i] = lut16(w[i] & 0x0F0F0F0Fu, t);
            k.q[i + 2] = lut16((w[i] >> 4) & 0x0F0F0F0Fu, t);
        }
        k.d = e8m0_half(q8_ld8(b));
        k.m = 0.f;
    }
};

template <> struct Q8Dot<GgmlType::IQ4_XS> {
    static constexpr bool kSplit = true;
    NITRO_HD static void load(const uint8_t* __restrict__ row, int c, Chunk& k) {
        const int sb = c >> 1, s = sb & 7;
        const uint8_t* b = row + (sb >> 3) * 136;
        uint32_t w[2];
        ld_words<2>(b + 8 + 16 * s + 8 * (c & 1), w);
        const Lut16 t = lut_iq4nl();
NITRO_Q8_UNROLL
        for (int i = 0; i < 2; ++i) {
            k.q[i] = lut16(w[i] & 0x0F0F0F0Fu, t);
            k.q[i + 2] = lut16((w[i] >> 4) & 0x0F0F0F0Fu, t);
        }
        const int scales_h = b[2] | (b[3] << 8);
        const int ls = ((b[4 + s / 2] >> (4 * (s % 2))) & 0xf) | (((scales_h >> (2 * s)) & 3) << 4);
        k.d = q8_fmul(d_fp16(b), static_cast<float>(ls - 32));
        k.m = 0.f;
    }
};

template <> struct Q8Dot<GgmlType::Q4_K> {
    static constexpr bool kSplit = false;
    NITRO_HD static void load(const uint8_t* __restrict__ row, int c, Chunk& k) {
        const int sb = c >> 1, s = sb & 7;
        const uint8_t* b = row + (sb >> 3) * 144;
        uint32_t w[4];
        ld_words<4>(b + 16 + 32 * (s >> 1) + 16 * (c & 1), w);
        const int shift = (s & 1) * 4;
NITRO_Q8_UNROLL
        for (int i = 0; i < 4; ++i) k.q[i] = static_cast<int>((w[i] >> shift) & 0x0F0F0F0Fu);
        int sc, m;
        scale_min_k4(s, b + 4, sc, m);
        k.d = q8_fmul(d_fp16(b), static_cast<float>(sc));
        k.m = q8_fmul(d_fp16(b + 2), static_cast<float>(m));
    }
    /// Chunks c and c + 2 (c of an even sub-block s): sub-blocks s and s + 1 are the low and high
    /// nibbles of the same 32 bytes, so one 16-byte load serves both chunks and one more the
    /// super-block's d, dmin and scales. The same Chunks as load(c) and load(c + 2).
    NITRO_HD static void load_pair(const uint8_t* __restrict__ row, int c, Chunk& ka, Chunk& kb) {
        const int sb = c >> 1, s = sb & 7;
        const uint8_t* b = row + (sb >> 3) * 144;
        uint32_t hd[4], w[4];
        ld_words16(b, hd);
        ld_words16(b + 16 + 32 * (s >> 1) + 16 * (c & 1), w);
        NITRO_Q8_UNROLL
        for (int i = 0; i < 4; ++i) {
            ka.q[i] = static_cast<int>(w[i] & 0x0F0F0F0Fu);
            kb.q[i] = static_cast<int>((w[i] >> 4) & 0x0F0F0F0Fu);
        }
        k_scales_pair(s, hd, ka, kb);
    }
};

template <> struct Q8Dot<GgmlType::Q5_K> {
    static constexpr bool kSplit = false;
    NITRO_HD static void load(const uint8_t* __restrict__ row, int c, Chunk& k) {
        const int sb = c >> 1, s = sb & 7, h = c & 1;
        const uint8_t* b = row + (sb >> 3) * 176;
        uint32_t w[4], qh[4];
        ld_words<4>(b + 48 + 32 * (s >> 1) + 16 * h, w);
        ld_words<4>(b + 16 + 16 * h, qh);
        const int shift = (s & 1) * 4;
NITRO_Q8_UNROLL
        for (int i = 0; i < 4; ++i)
            k.q[i] = static_cast<int>(((w[i] >> shift) & 0x0F0F0F0Fu) | (((qh[i] >> s) & 0x01010101u) << 4));
        int sc, m;
        scale_min_k4(s, b + 4, sc, m);
        k.d = q8_fmul(d_fp16(b), static_cast<float>(sc));
        k.m = q8_fmul(d_fp16(b + 2), static_cast<float>(m));
    }
    /// Chunks c and c + 2 (c of an even sub-block s), as Q4_K's load_pair: one load of the 16
    /// quant bytes both share, one of the fifth bits (bits s and s + 1), one of d, dmin and scales.
    NITRO_HD static void load_pair(const uint8_t* __restrict__ row, int c, Chunk& ka, Chunk& kb) {
        const int sb = c >> 1, s = sb & 7, h = c & 1;
        const uint8_t* b = row + (sb >> 3) * 176;
        uint32_t hd[4], w[4], qh[4];
        ld_words16(b, hd);
        ld_words16(b + 48 + 32 * (s >> 1) + 16 * h, w);
        ld_words16(b + 16 + 16 * h, qh);
        NITRO_Q8_UNROLL
        for (int i = 0; i < 4; ++i) {
            ka.q[i] = static_cast<int>((w[i] & 0x0F0F0F0Fu) | (((qh[i] >> s) & 0x01010101u) << 4));
            kb.q[i] = static_cast<int>(((w[i] >> 4) & 0x0F0F0F0Fu) | (((qh[i] >> (s + 1)) & 0x01010101u) << 4));
        }
        k_scales_pair(s, hd, ka, kb);
    }
};

template <> struct Q8Dot<GgmlType::Q6_K> {
    static constexpr bool kSplit = false;
    NITRO_HD static void load(const uint8_t* __restrict__ row, int c, Chunk& k) {
        const int sb = c >> 1, s = sb & 7, h = c & 1;
        const int half = s >> 2, g = s & 3;
        const uint8_t* b = row + (sb >> 3) * 210;
        uint32_t ql[4], qh[4];
        ld_words<4>(b + 64 * half + (g & 1) * 32 + 16 * h, ql);
        ld_words<4>(b + 128 + 32 * half + 16 * h, qh);
        const int ns = (g >> 1) * 4, hs = 2 * g;
        // (6-bit value) - 32 per byte: the 6-bit values are < 64, so the bytewise subtraction wraps
        // to the right int8 without touching the neighbours
NITRO_Q8_UNROLL
        for (int i = 0; i < 4; ++i)
            k.q[i] = static_cast<int>(
                q8_vsub4(((ql[i] >> ns) & 0x0F0F0F0Fu) | (((qh[i] >> hs) & 0x03030303u) << 4), 0x20202020u));
        const int8_t scale = static_cast<int8_t>(b[192 + 8 * half + 2 * g + h]);
        k.d = q8_fmul(d_fp16(b + 208), static_cast<float>(scale));
        k.m = 0.f;
    }
};

/// Whether a chunk's min term is used (K-quants with mins).
template <GgmlType T>
inline constexpr bool kHasMin = T == GgmlType::Q4_K || T == GgmlType::Q5_K;

/// The chunk's dot product with one token's 8-bit activations (q: the token's int8 row, xd: its
/// block scales, one per 32 values).
template <GgmlType T>
NITRO_HD float dot_chunk(const Chunk& k, int c, const int8_t* __restrict__ q,
                                           const float* __restrict__ xd) {
    const int sb = c >> 1, h = c & 1;
    const int* xi = reinterpret_cast<const int*>(q) + 8 * sb;
    int x[4];
    if constexpr (Q8Dot<T>::kSplit) {
        const int2 a = q8_ldv(reinterpret_cast<const int2*>(xi + 2 * h));
        const int2 b = q8_ldv(reinterpret_cast<const int2*>(xi + 4 + 2 * h));
        x[0] = a.x; x[1] = a.y; x[2] = b.x; x[3] = b.y;
    } else {
        const int4 a = q8_ldv(reinterpret_cast<const int4*>(xi + 4 * h));
        x[0] = a.x; x[1] = a.y; x[2] = a.z; x[3] = a.w;
    }
    int s = 0;
NITRO_Q8_UNROLL
    for (int i = 0; i < 4; ++i) s = q8_dp4a(k.q[i], x[i], s);
    const float dx = q8_ldv(xd + sb);
    if constexpr (kHasMin<T>) {
        int sx = 0;
NITRO_Q8_UNROLL
        for (int i = 0; i < 4; ++i) sx = q8_dp4a(0x01010101, x[i], sx);
        return dx * (k.d * static_cast<float>(s) - k.m * static_cast<float>(sx));
    } else {
        return (k.d * dx) * static_cast<float>(s);
    }
}

/// The CPU's 8-bit activation blocks (quantize_row_q8_0 / quantize_row_q8_K of src/quant, bit for
/// bit): v is the value of thread threadIdx.x of a CTA of 256 or 512 threads whose threads hold
/// consecutive values of a row (0 past the row's end); returns its int8 q and its block's scale d
/// (the CPU's value is q * d). Q8_0: blocks of 32 are the CTA's warps, d = amax / 127 rounded to
/// fp16, q = roundf(v / d). Q8_K: a block of 256 is each 256 consecutive threads (every thread
/// must call), d = 1 / (-127 / max) with max the first value of largest magnitude (the order of
/// comparison does not matter), q nearest-even, clamped to 127.
template <GgmlType VDT>
__device__ __forceinline__ void q8_value(float v, int& q, float& d) {
    if constexpr (VDT == GgmlType::Q8_0) {
        const float amax = warp_max(fabsf(v));
        const float dd = __fdiv_rn(amax, 127.f);
        const float id = dd != 0.f ? __fdiv_rn(1.f, dd) : 0.f;
        q = static_cast<int>(roundf(__fmul_rn(v, id)));
        d = __half2float(__float2half_rn(dd));
    } else {
        static_assert(VDT == GgmlType::Q8_K, "8-bit activation blocks are Q8_0 or Q8_K");
        __shared__ float s_ax[16], s_v[16];
        __shared__ int s_i[16];
        float ax = fabsf(v), mv = v;
        int mi = threadIdx.x;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const float ax2 = __shfl_xor_sync(0xffffffffu, ax, o), mv2 = __shfl_xor_sync(0xffffffffu, mv, o);
            const int mi2 = __shfl_xor_sync(0xffffffffu, mi, o);
            if (ax2 > ax || (ax2 == ax && mi2 < mi)) { ax = ax2; mv = mv2; mi = mi2; }
        }
        const int w = threadIdx.x / kWarp;
        if (threadIdx.x % kWarp == 0) { s_ax[w] = ax; s_v[w] = mv; s_i[w] = mi; }
        __syncthreads();
        const int w0 = (threadIdx.x / 256) * 8;  // this thread's block of 256: warps w0 .. w0 + 7
        ax = s_ax[w0]; mv = s_v[w0]; mi = s_i[w0];
        for (int k = 1; k < 8; ++k)
            if (s_ax[w0 + k] > ax || (s_ax[w0 + k] == ax && s_i[w0 + k] < mi)) {
                ax = s_ax[w0 + k];
                mv = s_v[w0 + k];
                mi = s_i[w0 + k];
            }
        __syncthreads();  // s_* are reused by the next call
        if (ax == 0.f) {
            q = 0;
            d = 0.f;
        } else {
            const float iscale = __fdiv_rn(-127.f, mv);
            q = min(127, __float2int_rn(__fmul_rn(iscale, v)));
            d = __fdiv_rn(1.f, iscale);
        }
    }
}

/// Calls f.template operator()<T>() for the weight types with an integer decode path; false for
/// the others (F32, F16, BF16 keep the f32 kernels).
template <typename F>
bool dispatch_q8_type(GgmlType t, F&& f) {
    switch (t) {
        case GgmlType::Q8_0: f.template operator()<GgmlType::Q8_0>(); return true;
        case GgmlType::Q4_0: f.template operator()<GgmlType::Q4_0>(); return true;
        case GgmlType::MXFP4: f.template operator()<GgmlType::MXFP4>(); return true;
        case GgmlType::Q4_K: f.template operator()<GgmlType::Q4_K>(); return true;
        case GgmlType::Q5_K: f.template operator()<GgmlType::Q5_K>(); return true;
        case GgmlType::Q6_K: f.template operator()<GgmlType::Q6_K>(); return true;
        case GgmlType::IQ4_XS: f.template operator()<GgmlType::IQ4_XS>(); return true;
        default: return false;
    }
}

}  // namespace nitro::cuda
