// Tokenizer parity with Hugging Face `tokenizers` 0.23.2 on shared/golden/tokenizer/*.jsonl,
// using the vocabularies inside the GGUF fixtures, plus the streaming detokenizer.
#include "tokenizer/bpe.h"
#include "tokenizer/detokenize.h"
#include "tokenizer/unicode.h"
#include "tokenizer_fixtures.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace nitro {
namespace {

using test::read_jsonl;
using test::tokenizer_for;

std::string ids_string(const std::vector<int32_t>& v) {
    std::string s;
    for (int32_t x : v) {  // (appends: GCC 12 warns falsely of "," + std::string&&)
        if (!s.empty()) s += ',';
        s += std::to_string(x);
    }
    return s;
}

class TokGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(TokGolden, IdsAndDecodeEqualHuggingFace) {
    const std::string family = GetParam();
    const Tokenizer& tok = tokenizer_for(family);
    const auto records = read_jsonl("golden/tokenizer/" + family + ".jsonl");
    ASSERT_EQ(records.size(), 105u) << "golden file changed: expected 97 plain + 8 special records";
    int ok = 0;
    for (size_t i = 0; i < records.size(); ++i) {
        const auto& r = records[i];
        const std::string text = r.at("text");
        const auto want = r.at("ids").get<std::vector<int32_t>>();
        EncodeOptions opt;
        opt.parse_special = r.at("special").get<bool>();
        const std::vector<int32_t> got = tok.encode(text, opt);
        EXPECT_EQ(ids_string(got), ids_string(want)) << family << " record " << i << " text: " << text;
        const std::string decoded = tok.decode(want);
        EXPECT_EQ(decoded, r.at("decoded").get<std::string>()) << family << " record " << i;
        ok += got == want && decoded == r.at("decoded").get<std::string>();
    }
    std::printf("[ golden   ] %s: %d/%zu tokenizer records equal Hugging Face\n", family.c_str(), ok, records.size());
}

TEST_P(TokGolden, AddSpecialMatchesVocabularyFlags) {
    // Neither model adds BOS/EOS (HF's post-processor adds none; add_bos_token is false).
    const Tokenizer& tok = tokenizer_for(GetParam());
    EncodeOptions opt;
    opt.add_special = true;
    EXPECT_EQ(tok.encode("Hello world", opt), tok.encode("Hello world"));
}

TEST_P(TokGolden, StreamingDetokenizerEqualsOneShotDecode) {
    const std::string family = GetParam();
    const Tokenizer& tok = tokenizer_for(family);
    for (const auto& r : read_jsonl("golden/tokenizer/" + family + ".jsonl")) {
        const auto ids = r.at("ids").get<std::vector<int32_t>>();
        StreamingDetokenizer det(tok);
        std::string all;
        for (int32_t id : ids) {
            const std::string piece = det.push(id);
            ASSERT_TRUE(utf8_is_valid(piece)) << "invalid UTF-8 emitted for " << r.at("text");
            all += piece;
        }
        EXPECT_EQ(det.pending(), 0u);
        all += det.flush();
        EXPECT_EQ(all, r.at("decoded").get<std::string>());
    }
}

INSTANTIATE_TEST_SUITE_P(Tok, TokGolden, ::testing::Values("gptoss", "qwen3"));

TEST(TokStreaming, HoldsBackSplitCharacterAndReplacesInvalidBytes) {
    const Tokenizer& tok = tokenizer_for("gptoss");
    const Vocab& v = tok.vocab();
    // "é" is C3 A9: fed as two byte tokens, nothing comes out until the second byte.
    StreamingDetokenizer det(tok);
    EXPECT_EQ(det.push(v.byte_token(0xC3)), "");
    EXPECT_EQ(det.pending(), 1u);
    EXPECT_EQ(det.push(v.byte_token(0xA9)), "\xC3\xA9");
    // An emoji (F0 9F 98 80) split 1+3.
    EXPECT_EQ(det.push(v.byte_token(0xF0)), "");
    EXPECT_EQ(det.push(v.byte_token(0x9F)), "");
    EXPECT_EQ(det.push(v.byte_token(0x98)), "");
    EXPECT_EQ(det.push(v.byte_token(0x80)), "\xF0\x9F\x98\x80");
    // A lone continuation byte can never become valid: U+FFFD at once.
    EXPECT_EQ(det.push(v.byte_token(0x80)), "\xEF\xBF\xBD");
    // A lead byte followed by ASCII: the lead is replaced, the ASCII kept.
    EXPECT_EQ(det.push(v.byte_token(0xE2)), "");
    EXPECT_EQ(det.push(v.byte_token('a')), "\xEF\xBF\xBD" "a");
    // E2 82 then end of stream: one U+FFFD for the truncated sequence.
    EXPECT_EQ(det.push(v.byte_token(0xE2)), "");
    EXPECT_EQ(det.push(v.byte_token(0x82)), "");
    EXPECT_EQ(det.flush(), "\xEF\xBF\xBD");
    EXPECT_EQ(det.pending(), 0u);
}

TEST(TokStreaming, MaximalSubpartReplacementMatchesOneShot) {
    // Unicode 3.9 examples: surrogates (ED A0 80) and overlongs (C0 AF, E0 80 AF) give one
    // U+FFFD per byte; F1 80 80 followed by ASCII gives one U+FFFD for the three bytes.
    const std::string bytes = "a\xED\xA0\x80" "b\xC0\xAF" "c\xE0\x80\xAF" "d\xF1\x80\x80" "e";
    const std::string want = "a\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD" "b\xEF\xBF\xBD\xEF\xBF\xBD"
                             "c\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD" "d\xEF\xBF\xBD" "e";
    EXPECT_EQ(utf8_sanitize(bytes), want);
    Utf8Stream s;
    std::string all;
    for (char c : bytes) all += s.push(std::string_view(&c, 1));
    all += s.flush();
    EXPECT_EQ(all, want);
}

TEST(TokSpecial, ControlTokensArePlainTextUnlessParsed) {
    const Tokenizer& tok = tokenizer_for("gptoss");
    const int32_t start = tok.vocab().find_text("<|start|>");
    ASSERT_GE(start, 0);
    EncodeOptions special;
    special.parse_special = true;
    EXPECT_EQ(tok.encode("<|start|>", special), std::vector<int32_t>{start});
    const auto plain = tok.encode("<|start|>");
    EXPECT_GT(plain.size(), 1u);
    EXPECT_EQ(tok.decode(plain), "<|start|>");
}

TEST(TokInput, InvalidUtf8IsReplacedNotRejected) {
    const Tokenizer& tok = tokenizer_for("qwen3");
    EXPECT_EQ(tok.encode("ab\xFF" "cd"), tok.encode("ab\xEF\xBF\xBD" "cd"));
}

TEST(TokUnicode, NfcComposesAndReorders) {
    EXPECT_EQ(nfc_normalize("e\xCC\x81"), "\xC3\xA9");                  // e + acute -> é
    EXPECT_EQ(nfc_normalize("\xE1\x84\x80\xE1\x85\xA1"), "\xEA\xB0\x80");  // Hangul L+V -> 가
    // q + dot below (ccc 220) + dot above (ccc 230) in the wrong order is reordered.
    EXPECT_EQ(nfc_normalize("q\xCC\x87\xCC\xA3"), "q\xCC\xA3\xCC\x87");
    EXPECT_EQ(nfc_normalize("\xE2\x84\xAB"), "\xC3\x85");  // ANGSTROM SIGN (singleton) -> Å
    // Mixed text: only the stretches around code points >= U+0300 are normalized, and the starter
    // before them (A, e) is composed with the mark that follows it.
    EXPECT_EQ(nfc_normalize("x A\xCC\x8A y e\xCC\x81 \xC3\xA9\xCC\x81 z"), "x \xC3\x85 y \xC3\xA9 \xC3\xA9\xCC\x81 z");
}

}  // namespace
}  // namespace nitro
