// Session behaviour: thread-count invariance, chunked prefill equals one-shot, sliding-window
// ring reuse, context limits and bad ids as clear errors.
#include "core/error.h"
#include "runtime/sampler.h"
#include "runtime/session.h"

#include <gtest/gtest.h>

#include <numeric>

using namespace nitro;

namespace {

std::string fixture(const char* name) { return std::string(NITRO_SHARED_DIR) + "/fixtures/" + name; }

std::vector<int32_t> pseudo_prompt(int n, int32_t vocab) {
    std::vector<int32_t> v(static_cast<size_t>(n));
    uint32_t x = 12345;
    for (auto& t : v) {
        x = x * 1664525u + 1013904223u;
        t = static_cast<int32_t>(x % 50000u) % vocab;
    }
    return v;
}

std::vector<float> run(const Model& m, const std::vector<int32_t>& prompt, SessionOptions so) {
    Session s(m, so);
    std::vector<float> logits;
    s.eval(prompt, true, logits);
    return logits;
}

}  // namespace

TEST(Session, ThreadCountDoesNotChangeLogits) {
    for (const char* f : {"tiny-gptoss-mxfp4.gguf", "tiny-qwen3moe-q8.gguf"}) {
        Model m(fixture(f));
        auto prompt = pseudo_prompt(40, static_cast<int32_t>(m.n_vocab()));
        SessionOptions so;
        so.n_threads = 1;
        auto a = run(m, prompt, so);
        for (int t : {2, 3, 5}) {
            so.n_threads = t;
            auto b = run(m, prompt, so);
            ASSERT_EQ(a.size(), b.size());
            EXPECT_TRUE(a == b) << f << ": logits differ between 1 and " << t << " threads";
        }
    }
}

TEST(Session, ChunkedPrefillAndDecodeMatchOneShot) {
    // 60 tokens through the gpt-oss fixture (sliding window 16): as one batch, in chunks of 7
    // (the SWA ring wraps several times), and token by token. Same logits up to float
    // reassociation-free equality: each token's computation is identical, so require exact.
    Model m(fixture("tiny-gptoss-mxfp4.gguf"));
    auto prompt = pseudo_prompt(60, static_cast<int32_t>(m.n_vocab()));
    SessionOptions so;
    so.n_threads = 2;
    auto one = run(m, prompt, so);
    so.n_ubatch = 7;
    auto chunked = run(m, prompt, so);
    EXPECT_TRUE(one == chunked);
    Session s(m, so);
    std::vector<float> logits;
    const int64_t V = m.n_vocab();
    for (size_t i = 0; i < prompt.size(); ++i) {
        s.eval(std::span<const int32_t>(&prompt[i], 1), false, logits);
        ASSERT_TRUE(std::equal(logits.begin(), logits.end(), one.begin() + static_cast<long>(i * V))) << "token " << i;
    }
}

TEST(Session, ContextLimitAndBadIdsAreClearErrors) {
    Model m(fixture("tiny-qwen3moe-q8.gguf"));
    SessionOptions so;
    so.n_ctx = 16;
    Session s(m, so);
    std::vector<float> logits;
    auto prompt = pseudo_prompt(17, static_cast<int32_t>(m.n_vocab()));
    try {
        s.eval(prompt, false, logits);
        FAIL() << "overflow accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("need 17 positions but the context holds 16"), std::string::npos) << e.what();
    }
    EXPECT_EQ(s.n_past(), 0);  // unchanged, still usable
    const int32_t bad[1] = {static_cast<int32_t>(m.n_vocab())};
    EXPECT_THROW(s.eval(bad, false, logits), Error);
    prompt.resize(16);
    EXPECT_NO_THROW(s.eval(prompt, false, logits));
    EXPECT_EQ(s.n_past(), 16);
}

TEST(Session, TruncateReusesPrefix) {
    Model m(fixture("tiny-qwen3moe-q8.gguf"));
    auto a = pseudo_prompt(20, static_cast<int32_t>(m.n_vocab()));
    SessionOptions so;
    so.n_threads = 2;
    auto ref = run(m, a, so);
    Session s(m, so);
    std::vector<float> logits;
    auto b = a;
    b[15] = (b[15] + 1) % static_cast<int32_t>(m.n_vocab());
    s.eval(b, false, logits);
    s.truncate(15);  // keep the shared prefix, redo the rest with a's tokens
    s.eval(std::span<const int32_t>(a.data() + 15, 5), true, logits);
    const int64_t V = m.n_vocab();
    EXPECT_TRUE(std::equal(logits.begin(), logits.end(), ref.begin() + 15 * V));
}
