// Several sequences in one Session (continuous batching): a batch of rows over sequences of
// different lengths (beyond the sliding window, prefill chunked, rows interleaved) gives every row
// the logits of its sequence evaluated alone, bit for bit; the single-sequence API is sequence 0;
// per-sequence truncation; bad batches are clear errors that change nothing; the Engine's
// one-sequence default of eval_batch (what the GPU engine uses).
#include "core/error.h"
#include "runtime/engine.h"
#include "runtime/session.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

using namespace nitro;

namespace {

std::string fixture(const char* name) { return std::string(NITRO_SHARED_DIR) + "/fixtures/" + name; }

std::vector<int32_t> pseudo_prompt(int n, int32_t vocab, uint32_t seed) {
    std::vector<int32_t> v(static_cast<size_t>(n));
    uint32_t x = seed;
    for (auto& t : v) {
        x = x * 1664525u + 1013904223u;
        t = static_cast<int32_t>((x >> 8) % static_cast<uint32_t>(vocab));
    }
    return v;
}

/// Logits of every position of `tokens` evaluated alone (one sequence, eval of all at once).
std::vector<float> alone(const Model& m, const std::vector<int32_t>& tokens, SessionOptions so) {
    so.n_seq = 1;
    Session s(m, so);
    std::vector<float> logits;
    s.eval(tokens, true, logits);
    return logits;
}

bool same_row(const std::vector<float>& a, size_t ra, const std::vector<float>& b, size_t rb, size_t V) {
    return std::equal(a.begin() + static_cast<long>(ra * V), a.begin() + static_cast<long>((ra + 1) * V),
                      b.begin() + static_cast<long>(rb * V));
}

/// Sequence lengths of the batch tests: short, past the gpt-oss fixture's sliding window (16)
/// several times, and one that decodes token by token alongside the others.
const std::vector<int> kLengths = {5, 23, 41, 60};

}  // namespace

TEST(Session, BatchedRowsEqualEachSequenceAlone) {
    for (const char* f : {"tiny-gptoss-mxfp4.gguf", "tiny-qwen3moe-q8.gguf"}) {
        Model m(fixture(f));
        const int32_t vocab = static_cast<int32_t>(m.n_vocab());
        const size_t V = static_cast<size_t>(vocab);
        SessionOptions so;
        so.n_threads = 2;
        so.n_ubatch = 7;  // batches above 7 rows are split; a sequence's rows span chunks
        std::vector<std::vector<int32_t>> seqs;
        std::vector<std::vector<float>> ref;
        for (size_t q = 0; q < kLengths.size(); ++q) {
            seqs.push_back(pseudo_prompt(kLengths[q], vocab, 1000u + static_cast<uint32_t>(q)));
            ref.push_back(alone(m, seqs.back(), so));
        }
        so.n_seq = static_cast<int>(seqs.size());
        Session s(m, so);
        ASSERT_EQ(s.n_seq(), 4);
        // Steps of a scheduler: sequence 0 and 2 advance one token per step (decode-like), 1 and 3
        // by chunks of 1..6 tokens; the order of the sequences in a batch rotates every step, and
        // every row asks for logits.
        std::vector<size_t> done(seqs.size(), 0);
        std::vector<float> logits;
        int step = 0, compared = 0;
        for (;; ++step) {
            std::vector<int32_t> tok, sq;
            std::vector<size_t> at;  // position of each row
            for (size_t r = 0; r < seqs.size(); ++r) {
                const size_t q = (r + static_cast<size_t>(step)) % seqs.size();
                const size_t left = seqs[q].size() - done[q];
                const size_t k = std::min(left, q % 2 == 0 ? size_t{1} : 1 + static_cast<size_t>(step * 3 + static_cast<int>(q)) % 6);
                for (size_t i = 0; i < k; ++i) {
                    tok.push_back(seqs[q][done[q] + i]);
                    sq.push_back(static_cast<int32_t>(q));
                    at.push_back(done[q] + i);
                }
                done[q] += k;
            }
            if (tok.empty()) break;
            const std::vector<uint8_t> want(tok.size(), 1);
            s.eval_batch(SeqBatch{tok, sq, want}, logits);
            ASSERT_EQ(logits.size(), tok.size() * V);
            for (size_t r = 0; r < tok.size(); ++r) {
                const size_t q = static_cast<size_t>(sq[r]);
                ASSERT_TRUE(same_row(logits, r, ref[q], at[r], V))
                    << f << ": step " << step << " row " << r << " (sequence " << q << ", position " << at[r] << ") differs from alone";
                ++compared;
            }
        }
        EXPECT_EQ(compared, std::accumulate(kLengths.begin(), kLengths.end(), 0));
        EXPECT_GE(step, 41) << "sequence 2 (41 tokens) advanced one token per step alongside the chunked ones";
        for (size_t q = 0; q < seqs.size(); ++q) EXPECT_EQ(s.seq_n_past(static_cast<int>(q)), kLengths[q]);
    }
}

TEST(Session, BatchLogitsOnlyForFlaggedRowsInRowOrder) {
    // Prompt chunks of two sequences plus a decode row: logits only where flagged, packed in row order.
    Model m(fixture("tiny-gptoss-mxfp4.gguf"));
    const int32_t vocab = static_cast<int32_t>(m.n_vocab());
    const size_t V = static_cast<size_t>(vocab);
    SessionOptions so;
    so.n_threads = 2;
    so.n_ubatch = 32;
    const auto a = pseudo_prompt(30, vocab, 7), b = pseudo_prompt(20, vocab, 8), c = pseudo_prompt(2, vocab, 9);
    const auto ra = alone(m, a, so), rb = alone(m, b, so), rc = alone(m, c, so);
    so.n_seq = 3;
    Session s(m, so);
    std::vector<float> logits;
    // Step 1: c's first token (decode-like), a[0..12), b[0..20): logits for c, a's last row, b's last row.
    std::vector<int32_t> tok{c[0]}, sq{2};
    std::vector<uint8_t> want{1};
    for (int i = 0; i < 12; ++i) tok.push_back(a[static_cast<size_t>(i)]), sq.push_back(0), want.push_back(i == 11);
    for (int i = 0; i < 20; ++i) tok.push_back(b[static_cast<size_t>(i)]), sq.push_back(1), want.push_back(i == 19);
    s.eval_batch(SeqBatch{tok, sq, want}, logits);
    ASSERT_EQ(logits.size(), 3 * V);
    EXPECT_TRUE(same_row(logits, 0, rc, 0, V));
    EXPECT_TRUE(same_row(logits, 1, ra, 11, V));
    EXPECT_TRUE(same_row(logits, 2, rb, 19, V));
    // Step 2: the rest of a with no logits flags at all, and c's second token with none either.
    tok.assign(a.begin() + 12, a.end());
    sq.assign(tok.size(), 0);
    tok.push_back(c[1]);
    sq.push_back(2);
    s.eval_batch(SeqBatch{tok, sq, {}}, logits);
    EXPECT_TRUE(logits.empty());
    EXPECT_EQ(s.seq_n_past(0), 30);
    EXPECT_EQ(s.seq_n_past(1), 20);
    EXPECT_EQ(s.seq_n_past(2), 2);
    // The single-sequence API is sequence 0: it continues a.
    const auto more = pseudo_prompt(3, vocab, 10);
    std::vector<int32_t> a2 = a;
    a2.insert(a2.end(), more.begin(), more.end());
    const auto ra2 = alone(m, a2, so);
    EXPECT_EQ(s.n_past(), 30);
    s.eval(more, true, logits);
    for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(same_row(logits, i, ra2, 30 + i, V)) << "token " << i;
}

TEST(Session, BatchTruncatePerSequence) {
    // Truncating one sequence and evaluating other tokens there leaves the others as they were.
    Model m(fixture("tiny-qwen3moe-q8.gguf"));
    const int32_t vocab = static_cast<int32_t>(m.n_vocab());
    const size_t V = static_cast<size_t>(vocab);
    SessionOptions so;
    so.n_threads = 2;
    const auto a = pseudo_prompt(20, vocab, 21), b = pseudo_prompt(20, vocab, 22);
    auto b2 = b;
    for (size_t i = 12; i < b2.size(); ++i) b2[i] = (b2[i] + 5) % vocab;
    const auto ra = alone(m, a, so), rb2 = alone(m, b2, so);
    so.n_seq = 2;
    Session s(m, so);
    std::vector<float> logits;
    std::vector<int32_t> tok(a.begin(), a.begin() + 15), sq(15, 0);
    tok.insert(tok.end(), b.begin(), b.end());
    sq.insert(sq.end(), 20, 1);
    s.eval_batch(SeqBatch{tok, sq, {}}, logits);
    s.seq_truncate(1, 12);  // keep b's first 12 tokens: they are b2's too
    EXPECT_EQ(s.seq_n_past(1), 12);
    EXPECT_EQ(s.seq_n_past(0), 15);
    tok.assign(b2.begin() + 12, b2.end());
    sq.assign(tok.size(), 1);
    tok.insert(tok.end(), a.begin() + 15, a.end());
    sq.insert(sq.end(), 5, 0);
    std::vector<uint8_t> want(tok.size(), 1);
    s.eval_batch(SeqBatch{tok, sq, want}, logits);
    for (size_t r = 0; r < 8; ++r) EXPECT_TRUE(same_row(logits, r, rb2, 12 + r, V)) << "b2 position " << 12 + r;
    for (size_t r = 0; r < 5; ++r) EXPECT_TRUE(same_row(logits, 8 + r, ra, 15 + r, V)) << "a position " << 15 + r;
    EXPECT_THROW(s.seq_truncate(0, 21), Error);
    EXPECT_THROW(s.seq_truncate(2, 0), Error);
}

TEST(Session, BadBatchesAreClearErrorsAndChangeNothing) {
    Model m(fixture("tiny-qwen3moe-q8.gguf"));
    SessionOptions so;
    so.n_ctx = 16;
    so.n_seq = 2;
    Session s(m, so);
    std::vector<float> logits;
    const std::vector<int32_t> t3{1, 2, 3};
    s.eval_batch(SeqBatch{t3, std::vector<int32_t>{0, 1, 1}, {}}, logits);
    auto message = [&](const SeqBatch& b) {
        try {
            s.eval_batch(b, logits);
        } catch (const Error& e) {
            return std::string(e.what());
        }
        return std::string("accepted");
    };
    const std::vector<int32_t> s3{0, 2, 1}, s2{0, 1}, ones(15, 1), seq1(15, 1);
    EXPECT_NE(message(SeqBatch{t3, s3, {}}).find("row 1 names sequence 2 but the session holds 2"), std::string::npos);
    EXPECT_NE(message(SeqBatch{t3, s2, {}}).find("3 tokens but 2 sequence ids"), std::string::npos);
    EXPECT_NE(message(SeqBatch{ones, seq1, {}}).find("sequence 1 needs 17 positions but the context holds 16"), std::string::npos);
    const std::vector<int32_t> bad{1, static_cast<int32_t>(m.n_vocab())};
    EXPECT_NE(message(SeqBatch{bad, s2, {}}).find("out of range"), std::string::npos);
    EXPECT_NE(message(SeqBatch{{}, {}, {}}).find("no rows"), std::string::npos);
    EXPECT_EQ(s.seq_n_past(0), 1);
    EXPECT_EQ(s.seq_n_past(1), 2);
    SessionOptions zero;
    zero.n_seq = 0;
    EXPECT_THROW(Session(m, zero), Error);
}

namespace {

/// An engine with one sequence that implements only the single-sequence API (as the GPU engine):
/// eval_batch, seq_n_past and seq_truncate are the Engine defaults.
class OneSequenceEngine final : public Engine {
public:
    OneSequenceEngine(const Model& m, const SessionOptions& so) : s_(m, so) {}
    void eval(std::span<const int32_t> tokens, bool all_logits, std::vector<float>& logits) override {
        s_.eval(tokens, all_logits, logits);
    }
    int64_t n_past() const override { return s_.n_past(); }
    int64_t n_ctx() const override { return s_.n_ctx(); }
    void truncate(int64_t n) override { s_.truncate(n); }
    std::string describe() const override { return "one-sequence test engine"; }

private:
    Session s_;
};

}  // namespace

TEST(Session, EngineDefaultBatchIsSequenceZeroOnly) {
    Model m(fixture("tiny-gptoss-mxfp4.gguf"));
    const int32_t vocab = static_cast<int32_t>(m.n_vocab());
    const size_t V = static_cast<size_t>(vocab);
    SessionOptions so;
    so.n_threads = 2;
    const auto a = pseudo_prompt(12, vocab, 31);
    const auto ra = alone(m, a, so);
    OneSequenceEngine e(m, so);
    EXPECT_EQ(e.n_seq(), 1);
    std::vector<float> logits;
    std::vector<int32_t> tok(a.begin(), a.begin() + 6), sq(6, 0);
    std::vector<uint8_t> want{0, 1, 0, 1, 0, 0};
    e.eval_batch(SeqBatch{tok, sq, want}, logits);  // rows 1 and 3: every row's logits, then picked
    ASSERT_EQ(logits.size(), 2 * V);
    EXPECT_TRUE(same_row(logits, 0, ra, 1, V));
    EXPECT_TRUE(same_row(logits, 1, ra, 3, V));
    tok.assign(a.begin() + 6, a.end());
    sq.assign(6, 0);
    want.assign(6, 0);
    want.back() = 1;
    e.eval_batch(SeqBatch{tok, sq, want}, logits);  // the last row only: one eval as today
    ASSERT_EQ(logits.size(), V);
    EXPECT_TRUE(same_row(logits, 0, ra, 11, V));
    EXPECT_EQ(e.seq_n_past(0), 12);
    e.seq_truncate(0, 4);
    EXPECT_EQ(e.n_past(), 4);
    sq.back() = 1;
    try {
        e.eval_batch(SeqBatch{tok, sq, want}, logits);
        FAIL() << "a second sequence accepted";
    } catch (const Error& err) {
        EXPECT_NE(std::string(err.what()).find("row 5 names sequence 1 but this engine (one-sequence test engine) holds one sequence"),
                  std::string::npos)
            << err.what();
    }
    EXPECT_EQ(e.n_past(), 4);
    EXPECT_THROW(e.seq_n_past(1), Error);
    EXPECT_THROW(e.seq_truncate(1, 0), Error);
}
