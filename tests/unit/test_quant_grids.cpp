// Invariants of the i-quant lookup tables (quant/iq_grids.h) that a corrupted table would break:
// ggml builds every grid from strictly increasing codes whose digit i is element i of the point,
// so decoding each point back to its code must give a strictly increasing sequence with every
// byte on the format's value set. The golden tests check the values ggml actually uses.
#include "quant/iq_grids.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace {

using namespace nitro::quant;

/// Decodes each point (n_elem bytes) to its code with `bits` bits per element, digit i = the
/// index of byte i in `levels`; fails on bytes outside `levels`. Returns the codes.
template <typename T>
std::vector<uint32_t> decode(const T* grid, int n, int n_elem, int bits, const std::vector<uint8_t>& levels) {
    std::vector<uint32_t> codes;
    for (int k = 0; k < n; ++k) {
        uint32_t code = 0;
        for (int i = 0; i < n_elem; ++i) {
            const auto byte = static_cast<uint8_t>(static_cast<uint64_t>(grid[k]) >> (8 * i));
            int digit = -1;
            for (size_t l = 0; l < levels.size(); ++l) {
                if (levels[l] == byte) digit = static_cast<int>(l);
            }
            EXPECT_GE(digit, 0) << "point " << k << " byte " << i << " = " << int(byte);
            code |= static_cast<uint32_t>(digit < 0 ? 0 : digit) << (bits * i);
        }
        codes.push_back(code);
    }
    return codes;
}

void expect_strictly_increasing(const std::vector<uint32_t>& codes, const char* name) {
    for (size_t k = 1; k < codes.size(); ++k) {
        EXPECT_LT(codes[k - 1], codes[k]) << name << " point " << k;
    }
}

TEST(QuantGrids, Iq2GridsAreSortedCodesOverThreeLevels) {
    const std::vector<uint8_t> levels = {0x08, 0x19, 0x2b};
    expect_strictly_increasing(decode(iq2xxs_grid, 256, 8, 2, levels), "iq2xxs_grid");
    expect_strictly_increasing(decode(iq2xs_grid, 512, 8, 2, levels), "iq2xs_grid");
    expect_strictly_increasing(decode(iq2s_grid, 1024, 8, 2, levels), "iq2s_grid");
    // Spot values from ggml-common.h.
    EXPECT_EQ(iq2xxs_grid[1], 0x080808080808082bull);
    EXPECT_EQ(iq2xxs_grid[255], 0x2b2b2b1908081908ull);
    EXPECT_EQ(iq2s_grid[76], 0x0808082b2b080808ull);
}

TEST(QuantGrids, Iq3GridsAreSortedCodesOverEightLevels) {
    expect_strictly_increasing(decode(iq3xxs_grid, 256, 4, 3, {4, 12, 20, 28, 36, 44, 52, 62}), "iq3xxs_grid");
    expect_strictly_increasing(decode(iq3s_grid, 512, 4, 3, {1, 3, 5, 7, 9, 11, 13, 15}), "iq3s_grid");
    EXPECT_EQ(iq3xxs_grid[255], 0x3e341c04u);
    EXPECT_EQ(iq3s_grid[511], 0x0f0f0101u);
}

TEST(QuantGrids, Iq1GridIsSortedCodesOverMinusOneZeroOne) {
    expect_strictly_increasing(decode(iq1s_grid, 2048, 8, 2, {0xff, 0x00, 0x01}), "iq1s_grid");
    EXPECT_EQ(iq1s_grid[0], 0xffffffffffffffffull);
    EXPECT_EQ(iq1s_grid[1], 0xffffffffffffff01ull);
}

TEST(QuantGrids, SignTablesAndLevels) {
    for (int i = 0; i < 128; ++i) {
        EXPECT_EQ(ksigns_iq2xs[i] & 127, i);
        EXPECT_EQ(__builtin_popcount(ksigns_iq2xs[i]) % 2, 0) << i;
    }
    for (int j = 0; j < 8; ++j) EXPECT_EQ(kmask_iq2xs[j], 1 << j);
    for (int j = 1; j < 16; ++j) EXPECT_LT(kvalues_iq4nl[j - 1], kvalues_iq4nl[j]);
    EXPECT_EQ(kvalues_iq4nl[0], -127);
    EXPECT_EQ(kvalues_iq4nl[15], 113);
}

}  // namespace
