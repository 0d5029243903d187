// The integer decode path's block decoders (src/cuda/q8dot.cuh) on the host, no GPU needed: every
// 16-value chunk of every supported weight type must unpack to exactly src/quant's dequantized
// values (value = d * q - m, the same f32 operations), and the chunk dot products of a row must sum
// to the f64 product of the dequantized row with the 8-bit activations. Rows of 2880 values in the
// 17-, 18- and 34-byte block types start at every byte alignment, so the unaligned loads are
// covered. (The kernels that use these run on the device: CudaOps.*.)
#include "cuda/q8dot.cuh"

#include "quant/types.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

using namespace nitro;
using namespace nitro::cuda;

namespace {

struct Case {
    GgmlType t;
    bool split;
};

template <GgmlType T>
void check_type(int64_t ne0, std::mt19937_64& rng) {
    SCOPED_TRACE(type_display_name(T) + " ne0=" + std::to_string(ne0));
    const int rows = 7;
    const size_t rb = row_size(T, ne0);
    std::normal_distribution<float> nd(0.f, 0.05f);
    // word-aligned storage, rows packed back to back as in a GGUF tensor
    std::vector<uint32_t> store((rb * rows + 3) / 4 + 1);
    auto* bytes = reinterpret_cast<uint8_t*>(store.data());
    std::vector<float> f(static_cast<size_t>(ne0)), deq(static_cast<size_t>(ne0 * rows));
    for (int r = 0; r < rows; ++r) {
        for (auto& v : f) v = nd(rng);
        if (r == 1) f[5] = 0.9f;  // an outlier: a large block scale
        quantize(T, f.data(), bytes + r * rb, ne0);
    }
    dequantize(T, bytes, deq.data(), ne0 * rows);
    // 8-bit activations with one scale per 32 values
    std::uniform_int_distribution<int> qd(-127, 127);
    std::vector<int8_t> xq(static_cast<size_t>(ne0));
    std::vector<float> xd(static_cast<size_t>(ne0 / 32));
    for (auto& v : xq) v = static_cast<int8_t>(qd(rng));
    for (auto& v : xd) v = std::ldexp(static_cast<float>(qd(rng) + 200), -14);
    const int n_chunks = static_cast<int>(ne0 / 16);
    int mismatches = 0;
    for (int r = 0; r < rows; ++r) {
        const uint8_t* row = bytes + r * rb;
        const float* ref = deq.data() + static_cast<size_t>(r) * ne0;
        double got = 0, want = 0, mag = 0;
        for (int c = 0; c < n_chunks; ++c) {
            Chunk k;
            Q8Dot<T>::load(row, c, k);
            const int sb = c >> 1, h = c & 1;
            for (int i = 0; i < 16; ++i) {
                const int lane = i / 4, byte = i % 4;
                const int idx = Q8Dot<T>::kSplit ? 32 * sb + (lane < 2 ? 8 * h + 4 * lane : 16 + 8 * h + 4 * (lane - 2)) + byte
                                                 : 32 * sb + 16 * h + i;
                const float q = static_cast<float>(static_cast<int8_t>(k.q[lane] >> (8 * byte)));
                volatile float prod = k.d * q;  // two roundings, as src/quant's d * q - m (no fused multiply-add)
                const float v = prod - k.m;
                if (!(v == ref[idx]) && mismatches++ < 5)
                    ADD_FAILURE() << "row " << r << " chunk " << c << " value " << idx << ": " << v << " != " << ref[idx];
            }
            got += dot_chunk<T>(k, c, xq.data(), xd.data());
        }
        for (int64_t i = 0; i < ne0; ++i) {
            const double a = static_cast<double>(xq[i]) * xd[i / 32];
            want += static_cast<double>(ref[i]) * a;
            mag += std::fabs(static_cast<double>(ref[i]) * a);
        }
        // f32 sums of ne0 / 16 chunk terms, each exact integer sums scaled once: ~1e-6 of the
        // magnitude
        EXPECT_LE(std::fabs(got - want), 1e-5 * mag) << "row " << r;
    }
    EXPECT_EQ(mismatches, 0);
}

}  // namespace

TEST(Q8DotHost, ChunksUnpackToTheDequantizedValuesAndDotExactly) {
    std::mt19937_64 rng(7);
    for (int64_t ne0 : {256, 512, 4096}) {
        check_type<GgmlType::Q8_0>(ne0, rng);
        check_type<GgmlType::Q4_0>(ne0, rng);
        check_type<GgmlType::MXFP4>(ne0, rng);
        check_type<GgmlType::Q4_K>(ne0, rng);
        check_type<GgmlType::Q5_K>(ne0, rng);
        check_type<GgmlType::Q6_K>(ne0, rng);
        check_type<GgmlType::IQ4_XS>(ne0, rng);
    }
    // gpt-oss rows (2880 = 90 blocks of 32): 17-, 18- and 34-byte blocks leave rows at every alignment
    for (int64_t ne0 : {2880, 96}) {
        check_type<GgmlType::Q8_0>(ne0, rng);
        check_type<GgmlType::Q4_0>(ne0, rng);
        check_type<GgmlType::MXFP4>(ne0, rng);
    }
}

namespace {

bool same_chunk(const Chunk& a, const Chunk& b) {
    for (int i = 0; i < 4; ++i)
        if (a.q[i] != b.q[i]) return false;
    return std::memcmp(&a.d, &b.d, sizeof(float)) == 0 && std::memcmp(&a.m, &b.m, sizeof(float)) == 0;
}

// load_pair(c) must be load(c) and load(c + 2), bit for bit, for every unit of a row, with the row
// at every byte offset (the device takes 16-byte loads only where aligned, ld_words elsewhere).
template <GgmlType T>
void check_pairs(int64_t ne0, std::mt19937_64& rng) {
    SCOPED_TRACE(type_display_name(T) + " ne0=" + std::to_string(ne0));
    const size_t rb = row_size(T, ne0);
    std::normal_distribution<float> nd(0.f, 0.05f);
    std::vector<float> f(static_cast<size_t>(ne0));
    for (auto& v : f) v = nd(rng);
    f[3] = -0.7f;
    std::vector<uint8_t> q(rb);
    quantize(T, f.data(), q.data(), ne0);
    for (int off = 0; off < 16; ++off) {
        std::vector<uint32_t> store(rb / 4 + 8);
        auto* row = reinterpret_cast<uint8_t*>(store.data()) + off;
        std::memcpy(row, q.data(), rb);
        const int n_units = static_cast<int>(ne0 / 32);
        int bad = 0;
        for (int u = 0; u < n_units; ++u) {
            const int c = pair_chunk(u);
            Chunk a, b, ra, rb2;
            Q8Dot<T>::load_pair(row, c, a, b);
            Q8Dot<T>::load(row, c, ra);
            Q8Dot<T>::load(row, c + 2, rb2);
            if ((!same_chunk(a, ra) || !same_chunk(b, rb2)) && bad++ < 3)
                ADD_FAILURE() << "offset " << off << " unit " << u << " (chunks " << c << ", " << c + 2 << ")";
        }
        // the units cover every chunk of the row exactly once
        std::vector<int> seen(static_cast<size_t>(ne0 / 16), 0);
        for (int u = 0; u < n_units; ++u) ++seen[pair_chunk(u)], ++seen[pair_chunk(u) + 2];
        for (int v : seen) ASSERT_EQ(v, 1);
    }
}

}  // namespace

TEST(Q8DotHost, ChunkPairsAreTheTwoChunksBitForBit) {
    std::mt19937_64 rng(11);
    for (int64_t ne0 : {256, 768, 2048}) {
        check_pairs<GgmlType::Q4_K>(ne0, rng);
        check_pairs<GgmlType::Q5_K>(ne0, rng);
    }
    // the scales of every sub-block from the three words equal ggml's get_scale_min_k4 on the bytes
    std::uniform_int_distribution<int> bd(0, 255);
    for (int rep = 0; rep < 2000; ++rep) {
        uint8_t sc[12];
        for (auto& b : sc) b = static_cast<uint8_t>(bd(rng));
        uint32_t w[3];
        std::memcpy(w, sc, 12);
        for (int j = 0; j < 8; ++j) {
            int s1, m1, s2, m2;
            scale_min_k4(j, sc, s1, m1);
            scale_min_k4_w(j, w[0], w[1], w[2], s2, m2);
            ASSERT_EQ(s1, s2) << "sub-block " << j;
            ASSERT_EQ(m1, m2) << "sub-block " << j;
        }
    }
}

TEST(Q8DotHost, TableLookupMatchesTheTables) {
    // every index in every byte position, both tables
    const int8_t mx[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
    const int8_t nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
    for (uint32_t a = 0; a < 16; ++a)
        for (uint32_t b = 0; b < 16; ++b) {
            const uint32_t v = a | (b << 8) | (((a + 5) & 15) << 16) | (((b + 11) & 15) << 24);
            const int m = lut16(v, lut_mxfp4()), n = lut16(v, lut_iq4nl());
            for (int k = 0; k < 4; ++k) {
                const int idx = static_cast<int>((v >> (8 * k)) & 15);
                EXPECT_EQ(static_cast<int8_t>(m >> (8 * k)), mx[idx]) << "mxfp4 index " << idx << " byte " << k;
                EXPECT_EQ(static_cast<int8_t>(n >> (8 * k)), nl[idx]) << "iq4nl index " << idx << " byte " << k;
            }
        }
}
