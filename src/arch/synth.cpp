#include "arch/synth.h"

#include "arch/arch.h"
#include "core/error.h"
#include "core/fp16.h"
#include "gguf/hf_tokenizer.h"
#include "gguf/writer.h"
#include "quant/blocks.h"

#include <cmath>
#include <future>
#include <thread>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace nitro {

namespace {

/// splitmix64: a small, fast, well-mixed generator; every tensor gets its own stream seeded from
/// (seed, name), so a tensor's values do not depend on the order or chunking of generation.
/// The splitmix64 counter step: after m draws the state is the seed + m * kRngStep.
constexpr uint64_t kRngStep = 0x9e3779b97f4a7c15ull;

struct Rng {
    uint64_t s;
    uint64_t next() {
        uint64_t z = (s += kRngStep);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }
    double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
    /// Standard normal (Box-Muller; the second value is dropped for simplicity of the stream).
    float normal() {
        double u1 = uniform();
        if (u1 < 1e-300) u1 = 1e-300;
        return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * uniform()));
    }
};

uint64_t name_hash(const std::string& s, uint64_t seed) {
    uint64_t h = 1469598103934665603ull ^ seed;  // FNV-1a
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
    return h;
}

// ------------------------------------------------------------------ random-code blocks
//
// Quantizing Gaussian floats costs ~300x more than writing random blocks (MEASURED for IQ4_XS:
// 2.2 against 750 MB per CPU-second; the reference quantizers search scales per sub-block), so every weight type that a real model's
// matrices use is written as random codes instead: uniform quants, sub-block scales drawn from a
// fixed range, and one block scale d chosen so that the dequantised values have the target std:
//   std = d * rms(sub-block scale) * rms(code value),
// with rms over the uniform distribution of each (a uniform integer on [a, b] has
// E[x^2] = ((a + b) / 2)^2 + ((b - a + 1)^2 - 1) / 12). Formats with a min (Q4_1, Q5_1, Q2_K, Q4_K,
// Q5_K) get min = the code's mean times the scale, so every sub-block has mean 0; formats without
// one whose codes have a nonzero mean (Q5_0: -0.5; IQ4_NL, IQ4_XS: -5.875; Q3_K: -0.5; Q6_K: -0.5)
// get a random sign on the block or sub-block scale, so the mean is 0 over the tensor. Every block
// makes a fixed number of draws (RandomCodes::draws_per_block), whatever the values drawn.
// Block layouts: quant/blocks.h. d is rounded to fp16 once per tensor: below 6.1e-5 it is
// subnormal (steps of 6e-8: rounding moves the std by up to 1% at d = 3e-6); synth_model refuses a std whose d rounds to 0 or
// infinity (not reached by the presets' scales).

/// Fills `n` bytes (a multiple of 8) with n / 8 draws.
void random_bytes(Rng& rng, uint8_t* dst, int n) {
    for (int i = 0; i < n; i += 8) {
        const uint64_t r = rng.next();
        std::memcpy(dst + i, &r, 8);
    }
}

uint16_t fp16_of(double v) { return f32_to_fp16(static_cast<float>(v)); }

/// Q4_1: x = d * q + m, q uniform on 0..15 (rms about the mean 7.5: sqrt(255 / 12) = 4.6098), m = -7.5 d.
/// 2 draws per block.
void fill_q4_1(int64_t nb, double d_value, Rng& rng, uint8_t* p) {
    const uint16_t d = fp16_of(d_value);
    const uint16_t m = fp16_of(-7.5 * fp16_to_f32(d));
    for (int64_t b = 0; b < nb; ++b, p += sizeof(quant::BlockQ4_1)) {
        std::memcpy(p, &d, 2);
        std::memcpy(p + 2, &m, 2);
        random_bytes(rng, p + 4, 16);
    }
}

/// Q5_0: x = d * (q - 16), q uniform on 0..31: E[(q - 16)^2] = 0.5^2 + 1023 / 12 = 85.5, rms 9.2466, mean
/// -0.5, so d has a random sign per block. 3 draws per block (qs, qs, qh | sign << 32).
void fill_q5_0(int64_t nb, double d_value, Rng& rng, uint8_t* p) {
    const uint16_t d = fp16_of(d_value);
    for (int64_t b = 0; b < nb; ++b, p += sizeof(quant::BlockQ5_0)) {
        random_bytes(rng, p + 6, 16);
        const uint64_t r = rng.next();
        const uint16_t ds = static_cast<uint16_t>(d | ((r >> 32) & 1) << 15);  // fp16 sign bit
        std::memcpy(p, &ds, 2);
        std::memcpy(p + 2, &r, 4);
    }
}

/// Q5_1: x = d * q + m, q uniform on 0..31 (rms about the mean 15.5: sqrt(1023 / 12) = 9.2331),
/// m = -15.5 d. 3 draws per block (qs, qs, qh).
void fill_q5_1(int64_t nb, double d_value, Rng& rng, uint8_t* p) {
    const uint16_t d = fp16_of(d_value);
    const uint16_t m = fp16_of(-15.5 * fp16_to_f32(d));
    for (int64_t b = 0; b < nb; ++b, p += sizeof(quant::BlockQ5_1)) {
        std::memcpy(p, &d, 2);
        std::memcpy(p + 2, &m, 2);
        random_bytes(rng, p + 8, 16);
        const uint64_t r = rng.next();
        std::memcpy(p + 4, &r, 4);
    }
}

/// IQ4_NL: x = d * kvalues_iq4nl[q], q uniform on 0..15: the table's sum of squares is 72768, so
/// rms sqrt(72768 / 16) = 67.439; its mean is -94 / 16 = -5.875, so d has a random sign per block.
/// 3 draws per block.
void fill_iq4_nl(int64_t nb, double d_value, Rng& rng, uint8_t* p) {
    const uint16_t d = fp16_of(d_value);
    for (int64_t b = 0; b < nb; ++b, p += sizeof(quant::BlockIQ4_NL)) {
        random_bytes(rng, p + 2, 16);
        const uint16_t ds = static_cast<uint16_t>(d | (rng.next() & 1) << 15);
        std::memcpy(p, &ds, 2);
    }
}

/// A 6-bit scale 32 +- m with m uniform on 16..31 and a random sign, from 5 random bits: the
/// signed sub-block scales of IQ4_XS and Q3_K (ls - 32 in [-31, -16] or [16, 31];
/// E[m^2] = 23.5^2 + 255 / 12 = 573.5, rms 23.948).
uint8_t signed_scale6(uint64_t bits5) {
    const int m = 16 + static_cast<int>(bits5 & 15);
    return static_cast<uint8_t>((bits5 & 16) ? 32 - m : 32 + m);
}

/// IQ4_XS: x = d * (ls - 32) * kvalues_iq4nl[q] per 32 values; ls - 32 = +-(16..31) (rms 23.948,
/// mean 0 by its sign), q uniform (rms 67.439): std = d * 23.948 * 67.439 = d * 1615.0.
/// 17 draws per block: 16 for qs, 1 for the 8 five-bit scale draws.
void fill_iq4_xs(int64_t nb, double d_value, Rng& rng, uint8_t* p) {
    quant::BlockIQ4_XS blk{};
    blk.d = fp16_of(d_value);
    for (int64_t b = 0; b < nb; ++b, p += sizeof blk) {
        random_bytes(rng, blk.qs, sizeof blk.qs);
        uint64_t r = rng.next();
        blk.scales_h = 0;
        std::memset(blk.scales_l, 0, sizeof blk.scales_l);
        for (int ib = 0; ib < 8; ++ib, r >>= 5) {
            const uint8_t ls = signed_scale6(r);
            blk.scales_l[ib / 2] |= static_cast<uint8_t>((ls & 0xf) << (4 * (ib % 2)));
            blk.scales_h |= static_cast<uint16_t>((ls >> 4) << (2 * ib));
        }
        std::memcpy(p, &blk, sizeof blk);
    }
}

/// Q2_K: x = d * sc * q - dmin * m per 16 values, q uniform on 0..3 (rms about the mean 1.5:
/// sqrt(15 / 12) = 1.1180), sc uniform on 8..15 (E[sc^2] = 11.5^2 + 63 / 12 = 137.5, rms 11.726),
/// m = sc and dmin = 1.5 d: std = d * 11.726 * 1.1180 = d * 13.110. 9 draws per block (8 for qs,
/// 1 for the 16 three-bit scales).
void fill_q2_k(int64_t nb, double d_value, Rng& rng, uint8_t* p) {
    quant::BlockQ2_K blk{};
    blk.d = fp16_of(d_value);
    blk.dmin = fp16_of(1.5 * fp16_to_f32(blk.d));
    for (int64_t b = 0; b < nb; ++b, p += sizeof blk) {
        random_bytes(rng, blk.qs, sizeof blk.qs);
        uint64_t r = rng.next();
        for (int j = 0; j < 16; ++j, r >>= 3) {
            const int sc = 8 + static_cast<int>(r & 7);
            blk.scales[j] = static_cast<uint8_t>(sc | sc << 4);
        }
        std::memcpy(p, &blk, sizeof blk);
    }
}

/// Q3_K: x = d * (sc - 32) * q per 16 values, q = 2 low bits - (high bit clear ? 4 : 0), uniform
/// on -4..3 (E[q^2] = 0.5^2 + 63 / 12 = 5.5, rms 2.3452, mean -0.5); sc - 32 = +-(16..31) (rms
/// 23.948, random sign): std = d * 23.948 * 2.3452 = d * 56.163. 14 draws per block (4 hmask,
/// 8 qs, 2 for the 16 five-bit scale draws). Scales packed as ggml's quantize_row_q3_K_ref:
/// low nibbles of scales 0..7 in bytes 0..7, of 8..15 in their high nibbles, the top 2 bits of
/// scale j at bits 2 * (j / 4) of byte 8 + j % 4.
void fill_q3_k(int64_t nb, double d_value, Rng& rng, uint8_t* p) {
    quant::BlockQ3_K blk{};
    blk.d = fp16_of(d_value);
    for (int64_t b = 0; b < nb; ++b, p += sizeof blk) {
        random_bytes(rng, blk.hmask, sizeof blk.hmask);
        random_bytes(rng, blk.qs, sizeof blk.qs);
        std::memset(blk.scales, 0, sizeof blk.scales);
        for (int half = 0; half < 2; ++half) {
            uint64_t r = rng.next();
            for (int k = 0; k < 8; ++k, r >>= 5) {
                const int j = half * 8 + k;
                const uint8_t l = signed_scale6(r);
                if (j < 8) blk.scales[j] = l & 0xf;
                else blk.scales[j - 8] |= static_cast<uint8_t>((l & 0xf) << 4);
                blk.scales[j % 4 + 8] |= static_cast<uint8_t>((l >> 4) << (2 * (j / 4)));
            }
        }
        std::memcpy(p, &blk, sizeof blk);
    }
}

/// The 6-bit scales and mins of Q4_K and Q5_K: sub-block j gets sc = m uniform on 32..63
/// (E[sc^2] = 47.5^2 + 1023 / 12 = 2341.5, rms 48.389) from 5 bits of `r`, packed as
/// get_scale_min_k4 reads them (j < 4: low 6 bits of bytes j and j + 4; j >= 4: nibbles of byte
/// j + 4, top 2 bits in bits 6..7 of bytes j - 4 and j).
void k4_scales(uint64_t r, uint8_t* scales) {
    std::memset(scales, 0, 12);
    for (int j = 0; j < 8; ++j, r >>= 5) {
        const uint8_t s = static_cast<uint8_t>(32 + (r & 31));
        if (j < 4) {
            scales[j] = s;
            scales[j + 4] = s;
        } else {
            scales[j + 4] = static_cast<uint8_t>((s & 0xf) | (s & 0xf) << 4);
            scales[j - 4] |= static_cast<uint8_t>((s >> 4) << 6);
            scales[j] |= static_cast<uint8_t>((s >> 4) << 6);
        }
    }
}

/// Q4_K: x = d * sc * q - dmin * m per 32 values, q uniform on 0..15 (rms about the mean 7.5:
/// 4.6098), m = sc, dmin = 7.5 d (so x = d * sc * (q - 7.5)): std = d * 48.389 * 4.6098 =
/// d * 223.06. 17 draws per block (16 qs, 1 for the 8 five-bit scale draws).
void fill_q4_k(int64_t nb, double d_value, Rng& rng, uint8_t* p) {
    quant::BlockQ4_K blk{};
    blk.d = fp16_of(d_value);
    blk.dmin = fp16_of(7.5 * fp16_to_f32(blk.d));
    for (int64_t b = 0; b < nb; ++b, p += sizeof blk) {
        random_bytes(rng, blk.qs, sizeof blk.qs);
        k4_scales(rng.next(), blk.scales);
        std::memcpy(p, &blk, sizeof blk);
    }
}

/// Q5_K: as Q4_K with q uniform on 0..31 (rms about the mean 15.5: 9.2331), dmin = 15.5 d:
/// std = d * 48.389 * 9.2331 = d * 446.78. 21 draws per block (4 qh, 16 qs, 1 scales).
void fill_q5_k(int64_t nb, double d_value, Rng& rng, uint8_t* p) {
    quant::BlockQ5_K blk{};
    blk.d = fp16_of(d_value);
    blk.dmin = fp16_of(15.5 * fp16_to_f32(blk.d));
    for (int64_t b = 0; b < nb; ++b, p += sizeof blk) {
        random_bytes(rng, blk.qh, sizeof blk.qh);
        random_bytes(rng, blk.qs, sizeof blk.qs);
        k4_scales(rng.next(), blk.scales);
        std::memcpy(p, &blk, sizeof blk);
    }
}

/// Q6_K: x = d * sc * (q - 32) per 16 values, q uniform on 0..63 (E[(q - 32)^2] = 0.5^2 +
/// 4095 / 12 = 341.5, rms 18.480, mean -0.5), sc = +-(64..127) int8 (E[sc^2] = 95.5^2 + 4095 / 12
/// = 9461.5, rms 97.270; random sign): std = d * 97.270 * 18.480 = d * 1797.5. 26 draws per
/// block (16 ql, 8 qh, 2 for the 16 seven-bit scale draws).
void fill_q6_k(int64_t nb, double d_value, Rng& rng, uint8_t* p) {
    quant::BlockQ6_K blk{};
    blk.d = fp16_of(d_value);
    for (int64_t b = 0; b < nb; ++b, p += sizeof blk) {
        random_bytes(rng, blk.ql, sizeof blk.ql);
        random_bytes(rng, blk.qh, sizeof blk.qh);
        for (int half = 0; half < 2; ++half) {
            uint64_t r = rng.next();
            for (int k = 0; k < 8; ++k, r >>= 7) {
                const int m = 64 + static_cast<int>(r & 63);
                blk.scales[half * 8 + k] = static_cast<int8_t>((r & 64) ? -m : m);
            }
        }
        std::memcpy(p, &blk, sizeof blk);
    }
}

/// A random-code type: its block writer (d_value: the block scale before fp16 rounding), the
/// draws each block makes, and the rms of a block's dequantised values per unit of d (the
/// products worked out at each fill_*), so that d = std / code_rms.
struct RandomCodes {
    void (*fill)(int64_t n_blocks, double d_value, Rng& rng, uint8_t* dst) = nullptr;
    uint64_t draws_per_block = 0;
    double code_rms = 0;
};

/// The random-code writer of type t, or one with fill == nullptr where t has none.
RandomCodes random_codes(GgmlType t) {
    switch (t) {
        case GgmlType::Q4_1: return {fill_q4_1, 2, 4.6098};
        case GgmlType::Q5_0: return {fill_q5_0, 3, 9.2466};
        case GgmlType::Q5_1: return {fill_q5_1, 3, 9.2331};
        case GgmlType::IQ4_NL: return {fill_iq4_nl, 3, 67.439};
        case GgmlType::IQ4_XS: return {fill_iq4_xs, 17, 23.948 * 67.439};
        case GgmlType::Q2_K: return {fill_q2_k, 9, 13.110};
        case GgmlType::Q3_K: return {fill_q3_k, 14, 56.163};
        case GgmlType::Q4_K: return {fill_q4_k, 17, 223.06};
        case GgmlType::Q5_K: return {fill_q5_k, 21, 446.78};
        case GgmlType::Q6_K: return {fill_q6_k, 26, 1797.5};
        default: return {};
    }
}

/// Draws of the generator that fill_rows makes per row of ne0 values of type t (fixed: no draw
/// depends on a drawn value), so a chunk of rows can start its stream at any row.
uint64_t draws_per_row(GgmlType t, int64_t ne0, const SynthInit& init) {
    const uint64_t per_value = 2 + (init.random_sign ? 1 : 0);  // normal(): two uniforms; sign: one
    switch (t) {
        case GgmlType::MXFP4:
        case GgmlType::Q4_0: return static_cast<uint64_t>(ne0 / 32) * 2;
        case GgmlType::Q8_0: return static_cast<uint64_t>(ne0 / 32) * 32;
        default: break;
    }
    if (const RandomCodes rc = random_codes(t); rc.fill)
        return static_cast<uint64_t>(ne0 / type_traits(t).block_size) * rc.draws_per_block;
    return static_cast<uint64_t>(ne0) * per_value;
}

/// Fills `out` with `n_rows` rows of tensor data of type `t`, row length `ne0`. MXFP4, Q8_0, Q4_0
/// and the types of random_codes are written as random codes with a scale chosen for the target
/// std (fast enough for 60 GB models); other quantized types quantize Gaussian floats.
void fill_rows(GgmlType t, int64_t ne0, int64_t n_rows, const SynthInit& init, Rng& rng, std::vector<uint8_t>& out,
               std::vector<float>& scratch) {
    const double sd = init.std;
    const size_t rb = row_size(t, ne0);
    out.resize(rb * static_cast<size_t>(n_rows));
    uint8_t* p = out.data();
    const int64_t n = ne0 * n_rows;
    auto gaussian = [&](float* dst, int64_t count) {
        if (init.dist != SynthInit::Dist::Normal) {
            for (int64_t i = 0; i < count; ++i) {
                const double u = rng.uniform();
                (void)rng.uniform();  // two draws per value, as normal()
                if (init.dist == SynthInit::Dist::SsmA) {
                    dst[i] = static_cast<float>(-(init.lo + (init.hi - init.lo) * u));
                } else {  // dt log-uniform; the bias b with softplus(b) = dt: b = dt + log(1 - exp(-dt))
                    const double dt = std::exp(std::log(init.lo) + (std::log(init.hi) - std::log(init.lo)) * u);
                    dst[i] = static_cast<float>(dt + std::log(-std::expm1(-dt)));
                }
            }
            return;
        }
        for (int64_t i = 0; i < count; ++i) {
            float v = static_cast<float>(init.mean) + rng.normal() * static_cast<float>(sd);
            if (init.random_sign && (rng.next() & 1)) v = -v;
            dst[i] = v;
        }
    };
    switch (t) {
        case GgmlType::F32: gaussian(reinterpret_cast<float*>(p), n); return;
        case GgmlType::F16:
        case GgmlType::BF16: {
            scratch.resize(static_cast<size_t>(n));
            gaussian(scratch.data(), n);
            auto* h = reinterpret_cast<uint16_t*>(p);
            for (int64_t i = 0; i < n; ++i) h[i] = t == GgmlType::F16 ? f32_to_fp16(scratch[i]) : f32_to_bf16(scratch[i]);
            return;
        }
        case GgmlType::MXFP4: {
            // Block: 1 E8M0 byte + 16 bytes of E2M1 codes. Uniform random codes of ggml's doubled
            // table {0,1,2,3,4,6,8,12} with random signs have rms 5.85 * 2^(e-128).
            const int e = std::clamp(static_cast<int>(std::lround(128 + std::log2(sd / 5.85))), 1, 254);
            for (int64_t b = 0; b < n / 32; ++b, p += 17) {
                p[0] = static_cast<uint8_t>(e);
                uint64_t r0 = rng.next(), r1 = rng.next();
                std::memcpy(p + 1, &r0, 8);
                std::memcpy(p + 9, &r1, 8);
            }
            return;
        }
        case GgmlType::Q8_0: {
            // Block: fp16 scale + 32 int8 codes uniform in [-127, 127] (rms 73.3).
            const uint16_t d = f32_to_fp16(static_cast<float>(sd / 73.3));
            for (int64_t b = 0; b < n / 32; ++b, p += 34) {
                std::memcpy(p, &d, 2);
                for (int i = 0; i < 32; ++i) p[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(rng.next() % 255 - 127));
            }
            return;
        }
        case GgmlType::Q4_0: {
            // Block: fp16 scale + 16 bytes of 4-bit codes (value = code - 8, rms 4.64).
            const uint16_t d = f32_to_fp16(static_cast<float>(sd / 4.64));
            for (int64_t b = 0; b < n / 32; ++b, p += 18) {
                std::memcpy(p, &d, 2);
                uint64_t r0 = rng.next(), r1 = rng.next();
                std::memcpy(p + 2, &r0, 8);
                std::memcpy(p + 10, &r1, 8);
            }
            return;
        }
        default: {
            if (const RandomCodes rc = random_codes(t); rc.fill) {
                rc.fill(n / type_traits(t).block_size, sd / rc.code_rms, rng, p);
                return;
            }
            scratch.resize(static_cast<size_t>(ne0));
            for (int64_t r = 0; r < n_rows; ++r) {
                gaussian(scratch.data(), ne0);
                quantize(t, scratch.data(), p + r * rb, ne0);
            }
            return;
        }
    }
}

/// GPT-2 byte-level BPE maps each byte to a printable code point (bytes_to_unicode in
/// openai/gpt-2 encoder.py): printable Latin-1 bytes map to themselves, others to U+0100 + k.
std::vector<std::string> byte_tokens() {
    std::vector<std::string> out(256);
    int k = 0;
    for (int b = 0; b < 256; ++b) {
        const bool printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
        const uint32_t cp = printable ? static_cast<uint32_t>(b) : 0x100u + static_cast<uint32_t>(k++);
        std::string s;
        if (cp < 0x80) s += static_cast<char>(cp);
        else {
            s += static_cast<char>(0xc0 | (cp >> 6));
            s += static_cast<char>(0x80 | (cp & 0x3f));
        }
        out[static_cast<size_t>(b)] = s;
    }
    return out;
}

std::shared_ptr<GgufArray> string_array(std::vector<std::string> v) {
    auto a = std::make_shared<GgufArray>();
    a->type = GgufType::STRING;
    a->data = std::move(v);
    return a;
}

/// A byte-level vocabulary (256 byte tokens, no merges) plus the architecture's special tokens,
/// padded with unused [PAD] tokens to `n_vocab` when that is larger. Returns the vocabulary size.
int64_t write_minimal_vocab(GgufMetadata& m, const SynthVocab& v, int64_t n_vocab) {
    std::vector<std::string> tokens = byte_tokens();
    std::vector<int32_t> types(256, 1);  // NORMAL
    for (std::string_view s : v.specials) {
        tokens.emplace_back(s);
        types.push_back(s.front() == '<' && s[1] == '|' ? 3 : 4);  // CONTROL / USER_DEFINED
    }
    for (int64_t i = static_cast<int64_t>(tokens.size()); i < n_vocab; ++i) {
        tokens.push_back("[PAD" + std::to_string(i) + "]");
        types.push_back(5);  // UNUSED
    }
    const auto id = [&](std::string_view s) {
        for (size_t i = 0; i < tokens.size(); ++i)
            if (tokens[i] == s) return static_cast<uint32_t>(i);
        return 0u;
    };
    const int64_t size = static_cast<int64_t>(tokens.size());
    m.set("tokenizer.ggml.model", std::string("gpt2"));
    m.set("tokenizer.ggml.pre", std::string(v.pre));
    m.set("tokenizer.ggml.tokens", string_array(std::move(tokens)));
    auto ta = std::make_shared<GgufArray>();
    ta->type = GgufType::INT32;
    ta->data = std::move(types);
    m.set("tokenizer.ggml.token_type", ta);
    m.set("tokenizer.ggml.merges", string_array({}));
    m.set("tokenizer.ggml.bos_token_id", id(v.bos));
    m.set("tokenizer.ggml.eos_token_id", id(v.eos));
    m.set("tokenizer.ggml.padding_token_id", id(v.pad));
    if (v.add_bos_token >= 0) m.set("tokenizer.ggml.add_bos_token", v.add_bos_token != 0);
    return size;
}

int64_t layer_of(const std::string& name);

/// --router-skew zipf:S on rows [r0, r0 + n) of a router tensor (F32; row = expert), in place.
void apply_router_skew(const ArchInfo& arch, const TensorSpec& spec, const SynthOptions& opt, int64_t r0, int64_t n,
                       std::vector<uint8_t>& buf) {
    const bool bias = arch.skew_router_bias && spec.kind == TensorKind::RouterBias;
    const bool rows = !arch.skew_router_bias && spec.kind == TensorKind::Router;  // no router bias
    if (!bias && !rows) return;
    const int64_t n_expert = bias ? spec.ne[0] : spec.ne[1];
    const std::vector<int> rank = synth_router_ranks(opt.seed, layer_of(spec.name), n_expert);
    auto* f = reinterpret_cast<float*>(buf.data());
    if (bias) {  // one row of n_expert biases
        for (int64_t e = 0; e < n_expert; ++e) f[e] = static_cast<float>(-opt.router_skew * std::log(rank[static_cast<size_t>(e)] + 1.0));
        return;
    }
    const int64_t ne0 = spec.ne[0];
    for (int64_t j = 0; j < n; ++j) {
        const float c = static_cast<float>(std::pow(rank[static_cast<size_t>(r0 + j)] + 1.0, -opt.router_skew));
        for (int64_t x = 0; x < ne0; ++x) f[j * ne0 + x] *= c;
    }
}

/// Layer index of a "blk.N.*" tensor name, or -1.
int64_t layer_of(const std::string& name) {
    if (name.rfind("blk.", 0) != 0) return -1;
    return std::strtoll(name.c_str() + 4, nullptr, 10);
}

}  // namespace

std::vector<int> synth_router_ranks(uint64_t seed, int64_t layer, int64_t n_expert) {
    std::vector<int> perm(static_cast<size_t>(n_expert));
    for (int64_t i = 0; i < n_expert; ++i) perm[static_cast<size_t>(i)] = static_cast<int>(i);
    Rng rng{name_hash("router_skew.blk." + std::to_string(layer), seed)};
    for (int64_t i = n_expert - 1; i > 0; --i) std::swap(perm[static_cast<size_t>(i)], perm[rng.next() % static_cast<uint64_t>(i + 1)]);
    // perm[r] is the expert of rank r; return the rank of each expert.
    std::vector<int> rank(static_cast<size_t>(n_expert));
    for (int64_t r = 0; r < n_expert; ++r) rank[static_cast<size_t>(perm[static_cast<size_t>(r)])] = static_cast<int>(r);
    return rank;
}

GgmlType synth_tensor_type(TensorKind k, GgmlType expert_type, GgmlType dense_type) {
    switch (k) {
        case TensorKind::Embedding: case TensorKind::Output: return GgmlType::Q8_0;
        case TensorKind::Matrix: return dense_type;
        case TensorKind::Expert: return expert_type;
        default: return GgmlType::F32;
    }
}

GgmlType synth_default_expert_type(const std::string& arch) {
    return require_arch(arch, "nitro synth").default_expert_type;
}

std::vector<std::string> synth_archs_with_preset(const std::string& preset) {
    std::vector<std::string> archs;
    for (const ArchInfo* a : all_archs())
        for (const SynthPreset& p : a->presets)
            if (p.name == preset) archs.emplace_back(a->name);
    return archs;
}

std::pair<std::string, std::string> synth_arch_preset(const std::string& spec, const std::string& what) {
    const size_t colon = spec.find(':');
    if (colon != std::string::npos) return {spec.substr(0, colon), spec.substr(colon + 1)};
    const std::vector<std::string> archs = synth_archs_with_preset(spec);
    if (archs.size() == 1) return {archs[0], spec};
    if (archs.empty()) {
        std::string known;
        for (const ArchInfo* a : all_archs())
            for (const SynthPreset& p : a->presets)
                if (known.find(std::string(p.name)) == std::string::npos) known += (known.empty() ? "" : ", ") + std::string(p.name);
        fail("{} '{}': no preset of that name (known: {})", what, spec, known);
    }
    std::string list;
    for (const auto& a : archs) list += (list.empty() ? "" : ", ") + a;
    fail("{} '{}': that preset exists for several architectures ({}); name one, e.g. {}:{}", what, spec, list, archs[0], spec);
}

ModelHparams synth_preset(const std::string& arch_name, const std::string& preset, int64_t* n_vocab, bool* tied_output) {
    const ArchInfo* arch = find_arch(arch_name);
    if (!arch) fail("nitro synth: unknown architecture '{}' (known: {})", arch_name, known_arch_names());
    std::string known;
    for (const SynthPreset& p : arch->presets) {
        if (p.name == preset) {
            ModelHparams h;
            h.arch = arch_name;
            h.name = "synth-" + preset;
            p.fill(h);
            *n_vocab = p.n_vocab;
            if (tied_output) *tied_output = p.tied_output;
            return h;
        }
        known += (known.empty() ? "" : ", ") + std::string(p.name);
    }
    fail("unknown preset '{}' for {} (known: {})", preset, arch_name, known);
}

void synth_model(const SynthOptions& opt, const std::function<void(uint64_t, uint64_t)>& progress) {
    if (opt.out.empty()) fail("nitro synth: an output path (-o FILE) is required");
    if (opt.chunk_bytes < 1) fail("nitro synth: chunk_bytes must be >= 1, got {}", opt.chunk_bytes);
    if (opt.n_threads < 0) fail("nitro synth: threads must be >= 0 (0 = all cores, up to 16), got {}", opt.n_threads);
    int64_t n_vocab = 0;
    bool tie_output = false;
    ModelHparams hp = synth_preset(opt.arch, opt.preset, &n_vocab, &tie_output);
    const ArchInfo& arch = require_arch(hp.arch, "nitro synth");
    const GgmlType expert_type = opt.expert_type.value_or(synth_default_expert_type(opt.arch));
    const auto& et = type_traits(expert_type);
    if (!et.quantize && expert_type != GgmlType::MXFP4 && expert_type != GgmlType::Q8_0 && expert_type != GgmlType::Q4_0 &&
        expert_type != GgmlType::F16 && expert_type != GgmlType::BF16 && expert_type != GgmlType::F32)
        fail("nitro synth: expert type {} has no quantizer in this build", type_display_name(expert_type));
    // Q8_K is ggml's activation type for the K-quants: no weight matrix uses it, and no engine has a
    // kernel for it (a file written with it would not run).
    if (expert_type == GgmlType::Q8_K) fail("nitro synth: Q8_K is an activation type, not a weight type; use q8_0");
    if (hp.n_embd % et.block_size != 0 || hp.n_ff_exp % et.block_size != 0)
        fail("nitro synth: expert type {} needs rows that are a multiple of {} values, but preset '{}' has "
             "n_embd {} and n_ff_exp {}",
             type_display_name(expert_type), et.block_size, opt.preset, hp.n_embd, hp.n_ff_exp);

    GgufWriter w;
    GgufMetadata& m = w.metadata();
    write_hparams(m, hp);
    m.set("general.file_type", llama_file_type_for(expert_type));
    m.set("general.quantization_version", uint32_t{2});

    if (!opt.vocab_from.empty() && !opt.tokenizer_dir.empty())
        fail("nitro synth: --vocab-from and --tokenizer both give the tokenizer; use one");
    if (!(opt.router_skew >= 0) || !std::isfinite(opt.router_skew))
        fail("nitro synth: router skew must be a finite number >= 0, got {}", opt.router_skew);
    if (opt.router_skew > 0) m.set("nitro.synth.router_skew_zipf", static_cast<float>(opt.router_skew));
    if (!opt.tokenizer_dir.empty()) {
        n_vocab = write_hf_tokenizer(m, opt.tokenizer_dir, n_vocab > 0 ? n_vocab : arch.vocab.real_n_vocab);
    } else if (!opt.vocab_from.empty()) {
        GgufModel src(opt.vocab_from);
        const GgufArray* toks = src.metadata().get_array("tokenizer.ggml.tokens");
        if (!toks) fail("'{}' has no tokenizer.ggml.tokens to copy", opt.vocab_from);
        for (const auto& [k, v] : src.metadata().entries())
            if (k.rfind("tokenizer.", 0) == 0) m.set(k, v);
        n_vocab = static_cast<int64_t>(toks->size());
    } else {
        n_vocab = write_minimal_vocab(m, arch.vocab, n_vocab);
    }

    std::vector<TensorSpec> specs = arch.tensors(hp, n_vocab);
    std::vector<TensorSpec> written;
    std::vector<SynthInit> inits;
    const GgmlType dense_type = opt.dense_type.value_or(GgmlType::F16);
    if (dense_type != GgmlType::F16 && dense_type != GgmlType::BF16 && dense_type != GgmlType::F32 &&
        !type_traits(dense_type).quantize && dense_type != GgmlType::Q8_0 && dense_type != GgmlType::Q4_0)
        fail("nitro synth: dense type {} has no quantizer in this build", type_display_name(dense_type));
    if (dense_type == GgmlType::Q8_K) fail("nitro synth: Q8_K is an activation type, not a weight type; use q8_0");
    for (auto& s : specs) {
        if (tie_output && s.id == TensorId::output) continue;
        if (s.legacy) continue;  // an older layout's alternative (qwen3next ssm_in)
        const GgmlType t = synth_tensor_type(s.kind, expert_type, dense_type);
        if (s.ne[0] % type_traits(t).block_size != 0)
            fail("nitro synth: tensor '{}' has rows of {} values, not a multiple of {}'s block of {}", s.name, s.ne[0],
                 type_display_name(t), type_traits(t).block_size);
        w.add_tensor(s.name, t, s.ne);
        written.push_back(s);
        inits.push_back(arch.synth_init(s, tie_output));
        if (const RandomCodes rc = random_codes(t); rc.fill) {
            const float d = fp16_to_f32(fp16_of(inits.back().std / rc.code_rms));
            if (!(std::isfinite(d) && d > 0))
                fail("nitro synth: tensor '{}' of std {} has no finite nonzero {} block scale", s.name, inits.back().std,
                     type_display_name(t));
        }
    }
    uint64_t total = 0;
    for (const auto& t : w.tensors()) total += t.n_bytes;

    w.open(opt.out);
    // Chunks of ~4 MiB (chunk_bytes) of rows are generated on all cores and written in order. The
    // generator is a counter (splitmix64) and every row draws a fixed number of values, so a chunk
    // starts its stream at row r * draws_per_row: the bytes depend on neither the thread count nor
    // the chunk size.
    const int n_threads =
        opt.n_threads > 0 ? opt.n_threads : static_cast<int>(std::max(1u, std::min(16u, std::thread::hardware_concurrency())));
    // Two sets of chunk buffers: one round of chunks is written (by an async task) while the next
    // is generated, so the single sequential writer overlaps with the generating threads.
    std::vector<std::vector<uint8_t>> bufs[2] = {std::vector<std::vector<uint8_t>>(static_cast<size_t>(n_threads)),
                                                 std::vector<std::vector<uint8_t>>(static_cast<size_t>(n_threads))};
    std::vector<std::vector<float>> scratch(static_cast<size_t>(n_threads));
    std::future<void> writing;  // the previous round's write; get() rethrows its I/O error
    int parity = 0;
    uint64_t done = 0;
    for (size_t i = 0; i < written.size(); ++i) {
        const GgufTensorInfo& info = w.tensors()[i];
        const uint64_t seed_state = name_hash(info.name, opt.seed);
        const int64_t ne0 = info.ne[0];
        const int64_t rows = info.ne[1] * info.ne[2] * info.ne[3];
        const size_t rb = row_size(info.type, ne0);
        const int64_t chunk = std::max<int64_t>(1, opt.chunk_bytes / static_cast<int64_t>(rb));
        const uint64_t per_row = draws_per_row(info.type, ne0, inits[i]);
        const int64_t n_chunks = (rows + chunk - 1) / chunk;
        for (int64_t c0 = 0; c0 < n_chunks; c0 += n_threads) {
            const int64_t nc = std::min<int64_t>(n_threads, n_chunks - c0);
            auto& set = bufs[parity];
            auto gen = [&](int64_t j) {
                const int64_t r = (c0 + j) * chunk, k = std::min(chunk, rows - r);
                Rng rng{seed_state + static_cast<uint64_t>(r) * per_row * kRngStep};
                fill_rows(info.type, ne0, k, inits[i], rng, set[static_cast<size_t>(j)], scratch[static_cast<size_t>(j)]);
                if (opt.router_skew > 0) apply_router_skew(arch, written[i], opt, r, k, set[static_cast<size_t>(j)]);
            };
            if (nc == 1) {
                gen(0);
            } else {
                std::vector<std::thread> team;
                for (int64_t j = 1; j < nc; ++j) team.emplace_back(gen, j);
                gen(0);
                for (auto& t : team) t.join();
            }
            if (writing.valid()) writing.get();  // the other set is free again
            writing = std::async(std::launch::async, [&w, &set, &done, &progress, nc, total] {
                for (int64_t j = 0; j < nc; ++j) {
                    const auto& b = set[static_cast<size_t>(j)];
                    w.write_data(b.data(), b.size());
                    done += b.size();
                    if (progress) progress(done, total);
                }
            });
            parity ^= 1;
        }
    }
    if (writing.valid()) writing.get();
    w.finish();
}

}  // namespace nitro
