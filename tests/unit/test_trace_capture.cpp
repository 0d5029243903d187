// Live routing capture: `nitro run --trace` writes one validated record per (token, layer) with
// the router's final choice, and `nitro sim` replays it.
#include "runtime/session.h"
#include "trace/trace_file.h"
#include "gguf_bytes.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <array>
#include <cstdio>
#include <memory>

using namespace nitro;

namespace {

std::string sh(const std::string& cmd, int* rc) {
    std::unique_ptr<FILE, int (*)(FILE*)> p(::popen((cmd + " 2>/dev/null").c_str(), "r"), ::pclose);
    std::string out;
    std::array<char, 4096> buf;
    size_t n;
    while ((n = std::fread(buf.data(), 1, buf.size(), p.get())) > 0) out.append(buf.data(), n);
    *rc = WEXITSTATUS(::pclose(p.release()));
    return out;
}

}  // namespace

TEST(TraceCapture, RunWritesEveryTokenAndLayerAndSimReplaysIt) {
    const std::string model = std::string(NITRO_SHARED_DIR) + "/fixtures/tiny-gptoss-mxfp4.gguf";
    const std::string trace = test::temp_dir("capture") + "/t.nmtr";
    int rc = -1;
    sh(std::string(NITRO_BINARY) + " run -m " + model + " --prompt-ids 13225,1588,382 -n 10 --ignore-eos -t 2 --trace " + trace, &rc);
    ASSERT_EQ(rc, 0);
    // 3 prompt tokens + 9 decoded tokens (the 10th is sampled but never evaluated) x 4 layers.
    Trace d = read_trace(trace);
    ASSERT_EQ(d.size(), 12u * 4);
    int prefill = 0;
    for (auto ph : d.phase) prefill += ph == TracePhase::Prefill;
    EXPECT_EQ(prefill, 3 * 4);
    // The recorded choice equals what the engine's router chose for the same tokens.
    Model m(model);
    Session s(m, SessionOptions{});
    std::vector<std::vector<int32_t>> seen;
    s.set_route_callback([&](const RouteEvent& e) {
        if (e.pos == 1 && e.layer == 2) seen.emplace_back(e.experts.begin(), e.experts.end());
    });
    std::vector<float> logits;
    const std::vector<int32_t> prompt = {13225, 1588, 382};
    s.eval(prompt, false, logits);
    ASSERT_EQ(seen.size(), 1u);
    bool found = false;
    for (size_t i = 0; i < d.size(); ++i)
        if (d.pos[i] == 1 && d.layer[i] == 2) {
            found = true;
            auto ids = d.record_ids(i);
            ASSERT_EQ(ids.size(), seen[0].size());
            for (size_t j = 0; j < ids.size(); ++j) EXPECT_EQ(static_cast<int32_t>(ids[j]), seen[0][j]);
        }
    EXPECT_TRUE(found);

    auto j = nlohmann::json::parse(sh(std::string(NITRO_BINARY) + " sim " + trace + " --policy lru,opt --capacity 2:4 --json", &rc));
    EXPECT_EQ(rc, 0);
    ASSERT_TRUE(j.contains("results")) << j.dump().substr(0, 300);
    for (const auto& r : j["results"]) {
        EXPECT_EQ(r["accesses"].get<int64_t>(), 12 * 4 * 4);
        EXPECT_LE(r["hits"].get<int64_t>(), r["accesses"].get<int64_t>());
    }
}
