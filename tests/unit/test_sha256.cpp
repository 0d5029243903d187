// SHA-256 against FIPS 180-4's published examples (the NIST "abc" and two-block vectors, and the
// empty message). The whole-file digest in bench records is checked against coreutils'
// sha256sum in test_bench_sweep.cpp.
#include "core/sha256.h"

#include <gtest/gtest.h>

#include <string>

using namespace nitro;

TEST(Sha256, FipsExamples) {
    EXPECT_EQ(sha256_hex("", 0), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    EXPECT_EQ(sha256_hex("abc", 3), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const std::string two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    EXPECT_EQ(sha256_hex(two.data(), two.size()), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}
