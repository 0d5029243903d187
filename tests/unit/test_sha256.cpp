// SHA-256 against FIPS 180-4's published examples (the NIST "abc" and two-block vectors, and the
// empty message). The whole-file digest in bench records is checked against coreutils'
// sha256sum in test_bench_sweep.cpp.
#include "core/sha256.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

using namespace nitro;

TEST(Sha256, FipsExamples) {
    EXPECT_EQ(sha256_hex("", 0), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    EXPECT_EQ(sha256_hex("abc", 3), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const std::string two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    EXPECT_EQ(sha256_hex(two.data(), two.size()), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

// The streaming digest (downloads are checked as they arrive): the two-block example fed in
// uneven pieces, then the object reused for "abc" after hex_digest() started it over.
TEST(Sha256, StreamedInPiecesMatchesFipsExamples) {
    const std::string two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    Sha256 h;
    for (size_t at = 0, step = 1; at < two.size(); at += step, step = step * 2 + 1)
        h.update(two.data() + at, std::min(step, two.size() - at));
    EXPECT_EQ(h.hex_digest(), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    h.update("ab", 2);
    h.update("c", 1);
    EXPECT_EQ(h.hex_digest(), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    EXPECT_EQ(Sha256().hex_digest(), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}
