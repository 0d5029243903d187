// Binary trace files: round trip, the capture API (TraceWriter), validation on write, and
// rejection of corrupted files with the offset of the first bad record.
#include "core/error.h"
#include "trace/trace_file.h"
#include "trace/trace_synth.h"
#include "gguf_bytes.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace nitro {
namespace {

std::string temp_path(const std::string& name) {
    static const std::string dir = test::temp_dir("trace-format");
    return dir + "/" + name;
}

std::vector<uint8_t> read_bytes(const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), {}};
}
void write_bytes(const std::string& p, const std::vector<uint8_t>& b) {
    std::ofstream f(p, std::ios::binary);
    f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

TraceHeader small_header(bool weights) {
    TraceHeader h;
    h.model_name = "tiny";
    h.model_hash = 0x1234567890abcdefull;
    h.n_layer = 2;
    h.n_expert = 8;
    h.n_expert_used = 2;
    h.has_weights = weights;
    h.bytes_per_expert_per_layer = {1000, 2000};
    return h;
}

using test::error_of;

TEST(TraceFormat, RecordSizeAndHeaderLayout) {
    // 12 + 2k without weights, + 4k with: k = 2 -> 16 and 24 bytes.
    EXPECT_EQ(trace_record_bytes(small_header(false)), 16u);
    EXPECT_EQ(trace_record_bytes(small_header(true)), 24u);
    const std::string p = temp_path("layout.nmtr");
    {
        TraceWriter w(p, small_header(true), TraceWriterOptions{2});
        const ExpertId ids[2] = {3, 5};
        const float wt[2] = {0.75f, 0.25f};
        w.write({7, 0, TracePhase::Decode, 1, ids, wt});
        w.close();
    }
    const std::vector<uint8_t> b = read_bytes(p);
    // header: 40 + name 4 + 2 layers x (8 expert bytes + 4 expert count) + checksum 8 = 76; chunk
    // header 16; 1 record 24; end 24.
    ASSERT_EQ(b.size(), 76u + 16 + 24 + 24);
    EXPECT_EQ(std::string(b.begin(), b.begin() + 4), "NMTR");
    EXPECT_EQ(b[4], 2);                                    // version
    EXPECT_EQ(b[8], 76);                                   // header_size
    EXPECT_EQ(b[12], 2);                                   // n_layer
    EXPECT_EQ(b[16], 8);                                   // n_expert
    EXPECT_EQ(b[20], 2);                                   // n_expert_used
    EXPECT_EQ(b[24], 1);                                   // flags: weights
    EXPECT_EQ(b[28], 4);                                   // name length
    EXPECT_EQ(b[32], 0xef);                                // model hash, little-endian
    EXPECT_EQ(std::string(b.begin() + 40, b.begin() + 44), "tiny");
    EXPECT_EQ(b[44] | (b[45] << 8), 1000);                 // layer 0 expert bytes
    EXPECT_EQ(b[60], 8);                                   // layer 0 routed experts (= n_expert)
    EXPECT_EQ(b[64], 8);                                   // layer 1
    EXPECT_EQ(std::string(b.begin() + 76, b.begin() + 80), "NMCK");
    EXPECT_EQ(b[80], 1);                                   // records in the chunk
    const size_t r = 92;                                   // the record
    EXPECT_EQ(b[r], 7);                                    // seq
    EXPECT_EQ(b[r + 8], 1);                                // layer
    EXPECT_EQ(b[r + 10], 1);                               // phase decode
    EXPECT_EQ(b[r + 11], 2);                               // n_used
    EXPECT_EQ(b[r + 12], 3);                               // first id
    EXPECT_EQ(b[r + 14], 5);                               // second id
    EXPECT_EQ(std::string(b.begin() + 116, b.begin() + 120), "NMEN");
    std::remove(p.c_str());
}

TEST(TraceFormat, RoundTripKeepsEveryField) {
    TraceHeader h = small_header(true);
    h.n_layer = 3;
    h.n_expert = 32;
    h.n_expert_used = 4;
    h.bytes_per_expert_per_layer = {10, 20, 30};
    SynthOptions o;
    o.n_sequences = 3;
    o.prompt_tokens = 5;
    o.decode_tokens = 40;
    o.locality = 0.4;
    const Trace t = synth_trace(h, o);
    const std::string p = temp_path("roundtrip.nmtr");
    write_trace(p, t, TraceWriterOptions{7});  // many chunks, the last one partial
    TraceFileInfo info;
    const Trace r = read_trace(p, &info);
    EXPECT_EQ(info.n_chunks, (t.size() + 6) / 7);
    EXPECT_EQ(r.header.model_name, h.model_name);
    EXPECT_EQ(r.header.model_hash, h.model_hash);
    EXPECT_EQ(r.header.bytes_per_expert_per_layer, h.bytes_per_expert_per_layer);
    EXPECT_EQ(r.seq, t.seq);
    EXPECT_EQ(r.pos, t.pos);
    EXPECT_EQ(r.phase, t.phase);
    EXPECT_EQ(r.layer, t.layer);
    EXPECT_EQ(r.ids, t.ids);
    EXPECT_EQ(r.weights, t.weights);
    EXPECT_TRUE(is_binary_trace(p));
    std::remove(p.c_str());
}

TEST(TraceFormat, LayersWithoutRoutedExpertsHaveNoRecords) {
    // DeepSeek-style: layer 0 a dense FFN layer, layers 1 and 2 with 8 experts.
    TraceHeader h = small_header(false);
    h.n_layer = 3;
    h.bytes_per_expert_per_layer = {0, 1000, 1000};
    h.layer_n_expert = {0, 8, 8};
    const std::string p = temp_path("dense.nmtr");
    const ExpertId ids[2] = {3, 5};
    {
        TraceWriter w(p, h);
        w.write({0, 0, TracePhase::Decode, 1, ids, {}});
        w.write({0, 0, TracePhase::Decode, 2, ids, {}});
        const std::string e = error_of([&] { w.write({0, 1, TracePhase::Decode, 0, ids, {}}); });
        EXPECT_NE(e.find("layer 0 has no routed experts"), std::string::npos) << e;
        w.close();
    }
    const Trace r = read_trace(p);
    EXPECT_EQ(r.header.layer_n_expert, (std::vector<uint32_t>{0, 8, 8}));
    EXPECT_EQ(r.header.experts_of(0), 0u);
    EXPECT_EQ(r.header.experts_of(2), 8u);
    EXPECT_EQ(r.size(), 2u);
    // A header whose counts make no sense is refused.
    h.layer_n_expert = {0, 0, 0};
    EXPECT_NE(error_of([&] { h.validate("h"); }).find("no layer has routed experts"), std::string::npos);
    h.layer_n_expert = {0, 9, 8};
    EXPECT_NE(error_of([&] { h.validate("h"); }).find("layer 1 has 9 experts"), std::string::npos);
    std::remove(p.c_str());
}

TEST(TraceFormat, Version1FilesAreStillRead) {
    // bench/traces holds traces written as version 1 (every layer with n_expert experts).
    const Trace t = read_trace(std::string(NITRO_SOURCE_DIR) + "/bench/traces/gpt-oss-20b.nmtr");
    EXPECT_TRUE(t.header.layer_n_expert.empty());
    EXPECT_EQ(t.header.n_layer, 24u);
    for (uint32_t l = 0; l < t.header.n_layer; ++l) EXPECT_EQ(t.header.experts_of(l), t.header.n_expert);
    EXPECT_GT(t.size(), 0u);
}

TEST(TraceCapture, EngineStyleWritesPrefillBlocksAndDecodeTokens) {
    // What the engine will do: for a prompt block, per layer, the router's ids for all tokens
    // (layer-major); then per generated token, per layer, one record.
    const std::string p = temp_path("capture.nmtr");
    const TraceHeader h = small_header(true);
    TraceWriter w(p, h, TraceWriterOptions{3});
    const std::vector<ExpertId> block_ids = {0, 1, 2, 3, 4, 5};  // 3 tokens x top-2
    const std::vector<float> block_w = {0.6f, 0.4f, 0.5f, 0.5f, 0.9f, 0.1f};
    for (uint32_t layer = 0; layer < 2; ++layer)
        w.write_block(/*seq*/ 0, /*pos0*/ 0, TracePhase::Prefill, layer, 3, block_ids, block_w);
    for (uint32_t pos = 3; pos < 5; ++pos)
        for (uint32_t layer = 0; layer < 2; ++layer) {
            const ExpertId ids[2] = {static_cast<ExpertId>(pos), static_cast<ExpertId>(layer)};
            const float wt[2] = {0.7f, 0.3f};
            w.write({0, pos, TracePhase::Decode, layer, ids, wt});
        }
    EXPECT_EQ(w.records_written(), 10u);
    w.close();
    const Trace t = read_trace(p);
    ASSERT_EQ(t.size(), 10u);
    EXPECT_EQ(t.layer[3], 1);       // second block: layer 1, token 0
    EXPECT_EQ(t.pos[3], 0u);
    EXPECT_EQ(t.record_ids(5)[0], 4);
    EXPECT_EQ(t.record_weights(5)[1], 0.1f);
    EXPECT_EQ(t.phase[6], TracePhase::Decode);
    size_t n_steps = 0;
    const std::vector<uint32_t> steps = t.step_index(&n_steps);
    EXPECT_EQ(n_steps, 5u);         // tokens 0..4
    EXPECT_EQ(steps[3], 0u);        // layer-major prefill: record 3 is token 0 again
    EXPECT_EQ(steps[9], 4u);
    std::remove(p.c_str());
}

TEST(TraceCapture, WriterRejectsBadRecordsAndStaysUsable) {
    const std::string p = temp_path("reject.nmtr");
    TraceWriter w(p, small_header(false));
    auto rec = [](std::vector<ExpertId> ids, uint32_t pos, uint32_t layer) {
        return [ids, pos, layer](TraceWriter& w) { w.write({1, pos, TracePhase::Decode, layer, ids, {}}); };
    };
    rec({1, 2}, 5, 0)(w);
    EXPECT_NE(error_of([&] { rec({1, 9}, 6, 0)(w); }).find("expert id 9 >= n_expert 8"), std::string::npos);
    EXPECT_NE(error_of([&] { rec({3, 3}, 6, 0)(w); }).find("appears twice"), std::string::npos);
    EXPECT_NE(error_of([&] { rec({3}, 6, 0)(w); }).find("expected n_expert_used = 2"), std::string::npos);
    EXPECT_NE(error_of([&] { rec({1, 2}, 5, 0)(w); }).find("does not increase"), std::string::npos);
    EXPECT_NE(error_of([&] { rec({1, 2}, 6, 2)(w); }).find("layer 2 >= n_layer 2"), std::string::npos);
    const float wt[2] = {0.5f, 0.5f};
    EXPECT_NE(error_of([&] { w.write({1, 6, TracePhase::Decode, 0, std::vector<ExpertId>{1, 2}, wt}); })
                  .find("has none"),
              std::string::npos);
    const std::string msg = error_of([&] { rec({1, 9}, 6, 0)(w); });
    EXPECT_NE(msg.find("record 1:"), std::string::npos) << msg;  // index of the record being written
    rec({1, 2}, 6, 0)(w);
    rec({1, 2}, 5, 1)(w);  // positions are per (sequence, layer)
    w.close();
    EXPECT_EQ(read_trace(p).size(), 3u);
    std::remove(p.c_str());
}

TEST(TraceCapture, WeightsMustBeFiniteAndNonNegative) {
    const std::string p = temp_path("weights.nmtr");
    TraceWriter w(p, small_header(true));
    const std::vector<ExpertId> ids = {1, 2};
    const float bad[2] = {0.5f, -0.1f};
    const float nan[2] = {0.5f, std::numeric_limits<float>::quiet_NaN()};
    EXPECT_NE(error_of([&] { w.write({0, 0, TracePhase::Decode, 0, ids, bad}); }).find("not a finite number >= 0"),
              std::string::npos);
    EXPECT_NE(error_of([&] { w.write({0, 0, TracePhase::Decode, 0, ids, nan}); }).find("not a finite number"),
              std::string::npos);
    EXPECT_NE(error_of([&] { w.write({0, 0, TracePhase::Decode, 0, ids, {}}); }).find("0 weights"), std::string::npos);
    w.close();
    std::remove(p.c_str());
}

// A small valid file shared by the corruption tests: 2 layers x 8 experts, top-2, weights,
// 12 records in chunks of 5 (5 + 5 + 2).
std::string make_valid_file(const std::string& name) {
    const std::string p = temp_path(name);
    TraceHeader h = small_header(true);
    SynthOptions o;
    o.n_sequences = 2;
    o.prompt_tokens = 1;
    o.decode_tokens = 2;
    write_trace(p, synth_trace(h, o), TraceWriterOptions{5});
    return p;
}

TEST(TraceValidation, EverySingleBitFlipIsRejected) {
    const std::string p = make_valid_file("flip.nmtr");
    const std::vector<uint8_t> good = read_bytes(p);
    ASSERT_EQ(read_trace(p).size(), 12u);
    const std::string q = temp_path("flip_bad.nmtr");
    for (size_t i = 0; i < good.size(); ++i)
        for (int bit : {0, 7}) {
            std::vector<uint8_t> bad = good;
            bad[i] ^= static_cast<uint8_t>(1u << bit);
            write_bytes(q, bad);
            EXPECT_THROW(read_trace(q), Error) << "byte " << i << " bit " << bit;
        }
    // Truncation anywhere, and trailing bytes, are rejected too.
    for (size_t n : {size_t{0}, size_t{40}, good.size() - 24, good.size() - 1}) {
        write_bytes(q, std::vector<uint8_t>(good.begin(), good.begin() + n));
        EXPECT_THROW(read_trace(q), Error) << "truncated to " << n;
    }
    std::vector<uint8_t> longer = good;
    longer.push_back(0);
    write_bytes(q, longer);
    EXPECT_THROW(read_trace(q), Error);
    std::remove(p.c_str());
    std::remove(q.c_str());
}

TEST(TraceValidation, ErrorNamesTheOffsetOfTheFirstBadRecord) {
    const std::string p = make_valid_file("offset.nmtr");
    std::vector<uint8_t> b = read_bytes(p);
    // header 40 + 4 ("tiny") + 2 layers x 12 + 8 = 76; chunk 0 header at 76, records at 92, 24
    // bytes each; chunk 1 header at 92 + 5*24 = 212, its records at 228. Record 7 = chunk 1's third
    // record, at 228 + 2*24 = 276; its first id is at +12.
    const size_t rec7 = 276;
    b[rec7 + 12] = 200;  // expert id 200 >= 8
    b[rec7 + 13] = 0;
    const std::string q = temp_path("offset_bad.nmtr");
    write_bytes(q, b);
    const std::string msg = error_of([&] { read_trace(q); });
    EXPECT_NE(msg.find("offset 276: record 7: expert id 200 >= n_expert 8"), std::string::npos) << msg;
    // A change that keeps every record valid is caught by the chunk checksum, and the message
    // names the chunk and its first record.
    b = read_bytes(p);
    b[rec7 + 16] ^= 0x01;  // lowest mantissa bit of the first weight: still a valid weight
    write_bytes(q, b);
    const std::string msg2 = error_of([&] { read_trace(q); });
    EXPECT_NE(msg2.find("offset 212: chunk checksum mismatch in records 5..9 (first record at offset 228)"),
              std::string::npos)
        << msg2;
    std::remove(p.c_str());
    std::remove(q.c_str());
}

TEST(TraceValidation, MissingEndMarkerSaysTheCaptureWasNotClosed) {
    const std::string p = make_valid_file("noend.nmtr");
    std::vector<uint8_t> b = read_bytes(p);
    b.resize(b.size() - 24);
    write_bytes(p, b);
    EXPECT_NE(error_of([&] { read_trace(p); }).find("not closed"), std::string::npos);
    std::remove(p.c_str());
}

}  // namespace
}  // namespace nitro
