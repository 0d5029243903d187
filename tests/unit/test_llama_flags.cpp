// The llama.cpp flag rewrite (cli/llama_flags.h) on a table of llama.cpp spellings, against a
// small stand-in for nitro's subcommands: what each spelling becomes, which values are skipped,
// and the message for a flag nitro does not have. The real binary is run on the same spellings in
// test_cli_llama_flags.cpp.
#include "cli/llama_flags.h"
#include "core/error.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

namespace nitro::cli {
namespace {

/// Two commands with some of nitro's options (name -> takes a value).
class FakeOptions : public CommandOptions {
public:
    std::map<std::string, std::map<std::string, bool>> opts = {
        {"run",
         {{"-m", true}, {"-p", true}, {"-n", true}, {"--n-predict", true}, {"-c", true}, {"-t", true}, {"--n-gpu-layers", true},
          {"--flash-attn", true}, {"--ubatch-size", true}, {"--batch-size", true}, {"--conversation", false},
          {"--interactive", false}, {"--cache-type-k", true}, {"--cache-type-v", true}, {"--threads-batch", true},
          {"--seed", true}, {"--jinja", false}, {"--system-prompt", true}, {"--gpu", true}, {"--cpu-moe", false},
          {"--n-cpu-moe", true}, {"--override-tensor", true}}},
        {"serve", {{"-m", true}, {"--port", true}, {"--parallel", true}, {"--alias", true}, {"--n-gpu-layers", true},
                   {"--flash-attn", true}, {"--cont-batching", false}, {"--http-threads", true}}},
        {"bench", {{"-m", true}, {"-p", true}, {"-n", true}, {"--flash-attn", true}}},
    };
    bool has(const std::string& c, const std::string& n) const override {
        auto it = opts.find(c);
        return it != opts.end() && it->second.count(n) > 0;
    }
    bool takes_value(const std::string& c, const std::string& n) const override { return has(c, n) && opts.at(c).at(n); }
    std::vector<std::string> commands() const override { return {"run", "serve", "bench"}; }
};

using Args = std::vector<std::string>;

Args rewrite(const std::string& command, const Args& args) { return rewrite_llama_flags(command, args, FakeOptions()); }

std::string error_of(const std::string& command, const Args& args) {
    try {
        rewrite(command, args);
    } catch (const Error& e) {
        return e.what();
    }
    return "(no error)";
}

TEST(LlamaFlags, MultiLetterSpellingsBecomeNitrosLongOptions) {
    const std::pair<Args, Args> run_cases[] = {
        {{"-ngl", "99"}, {"--n-gpu-layers", "99"}},
        {{"--gpu-layers", "0"}, {"--n-gpu-layers", "0"}},
        {{"-fa", "on"}, {"--flash-attn", "on"}},
        {{"-fa", "off"}, {"--flash-attn", "off"}},
        {{"-fa", "1"}, {"--flash-attn", "1"}},
        {{"-ub", "256"}, {"--ubatch-size", "256"}},
        {{"-b", "2048"}, {"--batch-size", "2048"}},
        {{"-cnv"}, {"--conversation"}},
        {{"-i"}, {"--interactive"}},
        {{"-ctk", "q8_0", "-ctv", "f16"}, {"--cache-type-k", "q8_0", "--cache-type-v", "f16"}},
        {{"-tb", "8"}, {"--threads-batch", "8"}},
        {{"-s", "42"}, {"--seed", "42"}},
        {{"--predict", "16"}, {"--n-predict", "16"}},
        {{"-sys", "be brief"}, {"--system-prompt", "be brief"}},
        {{"-mg", "1"}, {"--gpu", "1"}},
        {{"-cmoe"}, {"--cpu-moe"}},
        {{"-ncmoe", "20"}, {"--n-cpu-moe", "20"}},
        {{"-ot", "exps=CPU"}, {"--override-tensor", "exps=CPU"}},
        {{"--jinja"}, {"--jinja"}},
        // Native spellings stay as they are.
        {{"-m", "M.gguf", "-c", "4096", "-t", "8", "-n", "32"}, {"-m", "M.gguf", "-c", "4096", "-t", "8", "-n", "32"}},
        // Long form with an attached value.
        {{"--gpu-layers=99"}, {"--n-gpu-layers=99"}},
    };
    for (const auto& [in, want] : run_cases) EXPECT_EQ(rewrite("run", in), want) << in[0];
    EXPECT_EQ(rewrite("serve", {"-np", "2", "-a", "gpt", "-cb", "--threads-http", "4"}),
              (Args{"--parallel", "2", "--alias", "gpt", "--cont-batching", "--http-threads", "4"}));
}

TEST(LlamaFlags, FlashAttentionAloneMeansOn) {
    // Older llama.cpp: -fa was a flag. Without a value after it, it means on.
    EXPECT_EQ(rewrite("run", {"-fa", "-p", "hi"}), (Args{"--flash-attn=on", "-p", "hi"}));
    EXPECT_EQ(rewrite("run", {"-p", "hi", "-fa"}), (Args{"-p", "hi", "--flash-attn=on"}));
    EXPECT_EQ(rewrite("bench", {"-fa", "1", "-p", "64"}), (Args{"--flash-attn", "1", "-p", "64"}));
}

TEST(LlamaFlags, ValuesArePassedOverAndNothingAfterDoubleDash) {
    // The prompt "-fa" is a value of -p, not a flag; so is a negative number.
    EXPECT_EQ(rewrite("run", {"-p", "-fa", "-n", "-1"}), (Args{"-p", "-fa", "-n", "-1"}));
    EXPECT_EQ(rewrite("run", {"--", "-ngl"}), (Args{"--", "-ngl"}));
    // Unknown to both: left for CLI11 to report.
    EXPECT_EQ(rewrite("run", {"--frobnicate", "3"}), (Args{"--frobnicate", "3"}));
    // bench's -p and -n are its own (llama-bench's): not rewritten.
    EXPECT_EQ(rewrite("bench", {"-p", "512", "-n", "128"}), (Args{"-p", "512", "-n", "128"}));
}

TEST(LlamaFlags, FlagsNitroDoesNotHaveSayWhatToUse) {
    const std::pair<Args, std::string> cases[] = {
        {{"-sm", "layer"}, "nitro has no -sm; nitro runs on one GPU (--gpu N)"},
        {{"--tensor-split", "1,1"}, "nitro has no --tensor-split; nitro runs on one GPU"},
        {{"-dev", "CUDA0"}, "nitro has no -dev; use --gpu N"},
        {{"-nkvo"}, "nitro has no -nkvo; the K/V cache stays with the attention"},
        {{"--chat-template-file", "t.jinja"}, "nitro has no --chat-template-file; nitro has no Jinja engine"},
        {{"--repeat-penalty", "1.1"}, "nitro has no --repeat-penalty; nitro's samplers are --temp, --top-k, --top-p and --min-p"},
        {{"-md", "draft.gguf"}, "nitro has no -md; nitro has no speculative decoding"},
        {{"--fit", "on"}, "nitro has no --fit; it is not needed: nitro fits the model into --vram-budget"},
        {{"-nocb"}, "nitro has no -nocb; use --parallel 1"},
        {{"--no-kv-offload"}, "nitro has no --no-kv-offload;"},
        {{"-to", "600"}, "nitro has no -to; nitro serve has no request timeout"},
    };
    for (const auto& [args, want] : cases) {
        const std::string got = error_of("run", args);
        EXPECT_EQ(got.rfind(want, 0), 0u) << args[0] << ": " << got;
    }
}

TEST(LlamaFlags, AFlagOfAnotherCommandNamesTheCommandsThatHaveIt) {
    EXPECT_EQ(error_of("run", {"-np", "2"}), "nitro run has no -np (--parallel); nitro serve has it");
    EXPECT_EQ(error_of("bench", {"-ngl", "99"}), "nitro bench has no -ngl (--n-gpu-layers); nitro run and nitro serve have it");
}

TEST(LlamaFlags, TableHasNoDuplicateSpelling) {
    std::set<std::string> seen;
    for (const LlamaFlagInfo& f : llama_flag_table()) {
        EXPECT_TRUE(f.nitro.empty() != f.instead.empty()) << f.spellings[0];
        for (const std::string& s : f.spellings) EXPECT_TRUE(seen.insert(s).second) << "twice: " << s;
    }
}

}  // namespace
}  // namespace nitro::cli
