// Copy-on-compute (cpu::moe_ffn's copy_to, cache/expert_cache.h): while the CPU computes an
// admitted expert it writes the weight bytes it reads into a staging buffer in the layout of a VRAM
// slot (gate, up, down). The staged bytes must equal the expert's bytes in the file exactly, for
// every thread count, token count and mix of types; experts without a destination, skipped or not
// selected leave their buffers untouched; and copying changes no output value.
#include "cpu/moe.h"
#include "cpu/thread_pool.h"
#include "quant/types.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

using nitro::GgmlType;
using namespace nitro::cpu;

struct ExpertTensor {
    nitro::GgufTensorInfo info;
    std::vector<uint8_t> bytes;
};

/// A [ne0, ne1, nx] expert tensor of random bytes laid out as type `t` (the copy does not look at
/// the values; random bytes would decode to garbage, so use quantized random weights).
ExpertTensor experts(GgmlType t, int64_t ne0, int64_t ne1, int64_t nx, uint32_t seed) {
    ExpertTensor e;
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.f, 0.05f);
    const size_t rb = nitro::row_size(t, ne0);
    e.bytes.resize(rb * static_cast<size_t>(ne1 * nx));
    std::vector<float> row(static_cast<size_t>(ne0));
    for (int64_t r = 0; r < ne1 * nx; ++r) {
        for (float& v : row) v = nd(rng);
        nitro::quantize(t, row.data(), e.bytes.data() + static_cast<size_t>(r) * rb, ne0);
    }
    e.info.name = "exps";
    e.info.type = t;
    e.info.n_dims = 3;
    e.info.ne = {ne0, ne1, nx, 1};
    e.info.n_bytes = e.bytes.size();
    e.info.data = e.bytes.data();
    return e;
}

/// Expert x's bytes as a slot holds them: gate, up, down slices of the file.
std::vector<uint8_t> slot_bytes(const ExpertWeights& ex, int32_t x) {
    std::vector<uint8_t> v;
    for (const nitro::GgufTensorInfo* t : {ex.gate, ex.up, ex.down}) {
        const size_t per = t->n_bytes / static_cast<size_t>(t->ne[2]);
        v.insert(v.end(), t->data + static_cast<size_t>(x) * per, t->data + static_cast<size_t>(x + 1) * per);
    }
    return v;
}

TEST(MoeCopyOnCompute, StagedBytesEqualTheFileAndOutputsAreUnchanged) {
    struct Case {
        GgmlType gate, down;
        int64_t E, F;
    };
    // gpt-oss-like MXFP4, K-quants with a different down type, a shape with a partial 256-row group.
    const Case cases[] = {{GgmlType::MXFP4, GgmlType::MXFP4, 256, 320},
                          {GgmlType::Q4_K, GgmlType::Q6_K, 512, 256},
                          {GgmlType::Q8_0, GgmlType::Q8_0, 128, 96}};
    const int X = 8, K = 3;
    for (const Case& cs : cases) {
        const ExpertTensor g = experts(cs.gate, cs.E, cs.F, X, 1), u = experts(cs.gate, cs.E, cs.F, X, 2),
                           d = experts(cs.down, cs.F, cs.E, X, 3);
        ExpertWeights ex{&g.info, &u.info, &d.info, nullptr, nullptr, nullptr, nitro::FfnAct::Swiglu};
        const size_t bytes = ex.expert_bytes();
        for (int threads : {1, 3}) {
            ThreadPool pool(threads);
            for (int64_t n : {1, 5}) {
                std::mt19937 rng(static_cast<uint32_t>(n * 31 + threads));
                std::vector<float> h(static_cast<size_t>(n * cs.E));
                std::normal_distribution<float> nd(0.f, 1.f);
                for (float& v : h) v = nd(rng);
                std::vector<int32_t> ids;
                std::vector<float> w;
                for (int64_t t = 0; t < n; ++t)
                    for (int j = 0; j < K; ++j) {
                        ids.push_back(static_cast<int32_t>((t * 2 + j * 3) % X));
                        w.push_back(0.3f + 0.1f * j);
                    }
                std::vector<uint8_t> skip(X, 0);
                skip[static_cast<size_t>(ids[1])] = 1;  // the second selected expert is resident elsewhere
                // Destinations: every expert, poisoned; experts that are not computed must stay poisoned.
                std::vector<std::vector<uint8_t>> buf(X, std::vector<uint8_t>(bytes, 0xA5));
                std::vector<uint8_t*> to(X);
                for (int x = 0; x < X; ++x) to[static_cast<size_t>(x)] = buf[static_cast<size_t>(x)].data();
                to[static_cast<size_t>(ids[0])] = nullptr;  // one computed expert without a destination
                MoeScratch s1, s2;
                std::vector<float> out_copy(static_cast<size_t>(n * cs.E)), out_plain(out_copy.size());
                moe_ffn(pool, ex, h.data(), n, K, ids.data(), w.data(), skip.data(), out_copy.data(), s1, to.data());
                moe_ffn(pool, ex, h.data(), n, K, ids.data(), w.data(), skip.data(), out_plain.data(), s2);
                EXPECT_EQ(0, std::memcmp(out_copy.data(), out_plain.data(), out_copy.size() * 4)) << "copying changed outputs";
                for (int x = 0; x < X; ++x) {
                    const bool selected = std::find(ids.begin(), ids.end(), x) != ids.end();
                    const bool computed = selected && !skip[static_cast<size_t>(x)];
                    const std::string what = "type " + std::to_string(static_cast<int>(cs.gate)) + " expert " +
                                             std::to_string(x) + " threads " + std::to_string(threads) + " n " + std::to_string(n);
                    if (computed && x != ids[0]) {
                        EXPECT_EQ(buf[static_cast<size_t>(x)], slot_bytes(ex, x)) << what;
                    } else {
                        EXPECT_EQ(buf[static_cast<size_t>(x)], std::vector<uint8_t>(bytes, 0xA5)) << what << " was written";
                    }
                }
            }
        }
    }
}

}  // namespace
