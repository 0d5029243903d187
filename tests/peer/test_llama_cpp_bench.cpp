// The C++ llama.cpp peer (build/llama-peer/llama_cpp_bench, bench/llama_cpp_bench.cpp) really runs
// llama.cpp: on each fixture golden case it is given the golden prompt_token_ids and must produce
// the golden generated_token_ids up to the first step whose golden margin is below 0.1 nats (the
// rule of the node peer's self-check, tests/peer/llama_goldens.test.mjs; docs/peer.md says why the
// prebuilt libraries are not bit-exact with the goldens' native build at near-ties).
// The program path comes from NITRO_LLAMA_CPP_BENCH (ctest sets it), the data from
// NITRO_SHARED_DIR. A missing program (prebuilt libraries not installed when CMake ran) or missing
// data is a failure, never a skip.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace {

using nlohmann::json;
constexpr double kGreedyMargin = 0.1;   // nats, as GREEDY_MARGIN in llama_goldens.test.mjs

std::string env_or(const char* name, const std::string& def) {
    const char* v = std::getenv(name);
    return v && *v ? v : def;
}

std::string shared_dir() { return env_or("NITRO_SHARED_DIR", NITRO_SHARED_DIR); }
std::string peer_binary() { return env_or("NITRO_LLAMA_CPP_BENCH", NITRO_LLAMA_CPP_BENCH); }

std::string quote(const std::string& s) {
    std::string q = "'";
    for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
}

/// Runs the peer; returns its JSON reply, or fails the test with its output.
json run_peer(const std::string& model, const std::vector<int>& prompt, int n_gen) {
    std::string ids;
    for (size_t i = 0; i < prompt.size(); ++i) {
        if (i) ids += ',';
        ids += std::to_string(prompt[i]);
    }
    const std::string cmd = quote(peer_binary()) + " --model " + quote(model) + " --prompt-ids " + ids +
                            " --n-gen " + std::to_string(n_gen) + " --ids --threads 2 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    if (!p) throw std::runtime_error("cannot run " + cmd);
    std::string out;
    std::array<char, 4096> buf{};
    size_t n;
    while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
    const int status = pclose(p);
    if (status != 0) throw std::runtime_error("llama_cpp_bench failed (status " + std::to_string(status) + "): " + out);
    // stderr (one line naming the CPU backend) comes first; the reply is the last line.
    const size_t start = out.rfind("\n{");
    return json::parse(start == std::string::npos ? out : out.substr(start + 1));
}

class LlamaCppBenchGoldens : public ::testing::TestWithParam<std::string> {};

TEST_P(LlamaCppBenchGoldens, GreedyTokensEqualTheGoldensUpToTheFirstNearTie) {
    ASSERT_TRUE(std::filesystem::exists(peer_binary()))
        << "'" << peer_binary() << "' does not exist: llama_cpp_bench was not built because node-llama-cpp's "
        << "prebuilt llama.cpp (tools/peer/node_modules) was missing when CMake ran. Run scripts/setup.sh, then "
        << "re-run cmake.";
    const std::string base = shared_dir() + "/fixtures/" + GetParam();
    std::ifstream f(base + ".golden.json");
    ASSERT_TRUE(f) << "missing " << base << ".golden.json (set NITRO_SHARED_DIR to the shared/ folder)";
    const json golden = json::parse(f);
    ASSERT_EQ(golden.at("llama_cpp_commit").get<std::string>(), "80fb11ac73e66d89eae2c6a91d8a77428fa733ed");
    const auto& cases = golden.at("cases");
    ASSERT_GE(cases.size(), 9u);
    int compared = 0, identical = 0;
    for (const auto& c : cases) {
        const std::string name = c.at("name");
        const auto prompt = c.at("prompt_token_ids").get<std::vector<int>>();
        const auto G = c.at("generated_token_ids").get<std::vector<int>>();
        const auto& margins = c.at("margins");
        const json r = run_peer(base + ".gguf", prompt, static_cast<int>(G.size()));
        ASSERT_EQ(r.at("llama_cpp_commit"), "80fb11a");
        ASSERT_FALSE(r.at("ggml_cpu_variant").get<std::string>().empty());
        ASSERT_EQ(r.at("prompt_ids").get<std::vector<int>>(), prompt) << name;
        const auto ids = r.at("ids").get<std::vector<int>>();
        ASSERT_EQ(ids.size(), G.size()) << name;
        size_t first_low = G.size();
        for (size_t s = 0; s < margins.size() && s < G.size(); ++s)
            if (!margins[s].is_null() && margins[s].get<double>() < kGreedyMargin) { first_low = s; break; }
        for (size_t s = 0; s < first_low; ++s) {
            ASSERT_EQ(ids[s], G[s]) << name << ": greedy token " << s << " is " << ids[s] << ", golden " << G[s]
                                    << " (golden margin " << margins[s] << ")";
            ++compared;
        }
        if (ids == G) ++identical;
    }
    EXPECT_GE(compared, 20) << "too few steps before the first near-tie to show anything";
    std::printf("%s: %d tokens compared before the first golden margin < %.1f; %d of %zu cases identical for all tokens\n",
                GetParam().c_str(), compared, kGreedyMargin, identical, cases.size());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, LlamaCppBenchGoldens,
                         ::testing::Values("tiny-gptoss-mxfp4", "tiny-qwen3moe-q8"),
                         [](const auto& info) { return info.param == "tiny-gptoss-mxfp4" ? std::string("gptoss") : std::string("qwen3moe"); });

}  // namespace
