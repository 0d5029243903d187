// `nitro` end to end on bad command-line input: each case gives a clear message naming the file or
// flag and a clean exit status (never an abort), and the warnings a new user should see.
#include "gguf_bytes.h"

#include <gtest/gtest.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/wait.h>

namespace nitro {
namespace {

const std::string kModel = std::string(NITRO_SOURCE_DIR) + "/models/tiny-moe-pystd.gguf";
const int kValidationError = static_cast<int>(CLI::ExitCodes::ValidationError);

struct Ran {
    int status = -1;  ///< exit status; 128 + N when killed by signal N (an abort is 134)
    std::string out;  ///< stdout and stderr together
};

/// Runs `nitro ARGS` with stdout and stderr into one file.
Ran nitro_cli(const std::string& args) {
    static const std::string log = test::temp_dir("cli-errors") + "/log";
    const int rc = std::system((std::string(NITRO_BINARY) + " " + args + " >" + log + " 2>&1").c_str());
    Ran r;
    r.status = WIFEXITED(rc) ? WEXITSTATUS(rc) : WIFSIGNALED(rc) ? 128 + WTERMSIG(rc) : -1;
    std::ifstream f(log);
    std::stringstream ss;
    ss << f.rdbuf();
    r.out = ss.str();
    return r;
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(CliErrors, DirectoryOrMissingInputFileIsAnErrorNamingThePath) {
    const std::string dir = test::temp_dir("cli-dir-input");
    const std::string missing = dir + "/missing.txt";
    // Every user-named input file, given a directory: an error naming it, exit status 1.
    const std::pair<std::string, std::string> cases[] = {
        {"run -n 2 -f " + dir, "prompt file '" + dir + "' is a directory"},
        {"tokenize -m " + kModel + " --chat " + dir, "--chat '" + dir + "' is a directory"},
        {"sim " + dir, "trace '" + dir + "' is a directory"},
        {"sim --import-jsonl " + dir, "JSON Lines trace '" + dir + "' is a directory"},
        {"trace import " + dir + " -o " + dir + "/t.nmtr --n-layer 1 --n-expert 2",
         "JSON Lines trace '" + dir + "' is a directory"},
        {"bench -m " + kModel + " -o " + dir + "/out --requests " + dir, "--requests '" + dir + "' is a directory"},
        {"run --mode cpu -n 1 -p x --hot-set " + dir, "--hot-set '" + dir + "' is a directory"},
        {"run -n 2 -f " + missing, "prompt file '" + missing + "': cannot open: No such file or directory"},
        {"tokenize -m " + kModel + " --chat " + missing, "--chat '" + missing + "': cannot open: No such file"},
        {"sim " + missing, "trace '" + missing + "': cannot open: No such file"},
    };
    for (const auto& [args, message] : cases) {
        const Ran r = nitro_cli(args);
        EXPECT_EQ(r.status, 1) << args << "\n" << r.out;
        EXPECT_TRUE(has(r.out, "error: " + message)) << args << "\n" << r.out;
    }
}

TEST(CliErrors, BenchRejectsCountsOutOfRangeNamingTheFlag) {
    const std::string bench = "bench -m " + kModel + " -t 1 --kernels none ";
    const std::pair<std::string, std::string> cases[] = {
        {"-p -1", "--n-prompt: must be at least 1, got -1"},
        {"-p 0", "--n-prompt: must be at least 1, got 0"},
        {"-n 0", "--n-gen: must be at least 1, got 0"},
        {"-n -1", "--n-gen: must be at least 1, got -1"},
        {"--no-engine --kernel-tokens -3", "--kernel-tokens: must be at least 1, got -3"},
        {"--kernel-tokens 1,0", "--kernel-tokens: must be at least 1, got 0"},
        {"--kernel-pool -1", "--kernel-pool: must be greater than 0, got -1"},
        {"--kernel-pool 0", "--kernel-pool: must be greater than 0, got 0"},
        {"--kernel-pool nan", "--kernel-pool: must be greater than 0, got nan"},
        {"--kernel-experts 0", "--kernel-experts: must be at least 1, got 0"},
        {"--kernel-seconds 0", "--kernel-seconds: must be greater than 0, got 0"},
        {"--kernel-seconds -0.5", "--kernel-seconds: must be greater than 0, got -0.5"},
        {"--read-probe -1", "--read-probe: must be greater than 0, got -1"},
    };
    for (const auto& [args, message] : cases) {
        const Ran r = nitro_cli(bench + args);
        EXPECT_EQ(r.status, kValidationError) << args << "\n" << r.out;
        EXPECT_TRUE(has(r.out, message)) << args << "\n" << r.out;
    }
}

TEST(CliErrors, PlanAndPlacementNumbersAreChecked) {
    // Found by a fresh-user trial: a negative or nan runtime size wrapped to petabytes, a negative
    // bandwidth printed a negative tok/s, an unknown cache policy ran with rc 0.
    const std::string plan = "plan -m " + kModel + " --vram-budget 1 ";
    const std::pair<std::string, std::string> cases[] = {
        {plan + "--runtime-mib -700", "--runtime-mib: must be between 0 and 10000000, got -700"},
        {plan + "--runtime-mib nan", "--runtime-mib: must be between 0 and 10000000, got nan"},
        {plan + "--cpu-moe --dram-gbps -5", "--dram-gbps: must be greater than 0, got -5"},
        {plan + "--n-cpu-moe -3", "--n-cpu-moe: must be at least 0, got -3"},
        {plan + "--cache-policy bogus", "--cache-policy: unknown eviction policy 'bogus'"},
        {plan + "--cache-policy freq-decay:-1",
         "--cache-policy: eviction policy 'freq-decay:-1': expected freq-decay:HALF_LIFE"},
        {"plan -m " + kModel + " --vram-budget nan", "--vram-budget: must be between 0 and 1000000, got nan"},
        {"run -p x -n 1 --cache-policy bogus", "--cache-policy: unknown eviction policy 'bogus'"},
    };
    for (const auto& [args, message] : cases) {
        const Ran r = nitro_cli(args);
        EXPECT_EQ(r.status, kValidationError) << args << "\n" << r.out;
        EXPECT_TRUE(has(r.out, message)) << args << "\n" << r.out;
    }
    EXPECT_EQ(nitro_cli(plan + "--cache-policy freq-decay:64").status, 0) << "a valid policy still plans";
    // --cpu-moe puts every layer's experts on the CPU, so an --n-cpu-moe beside it did nothing
    // (as in llama.cpp, where --cpu-moe overrides every layer): now an error naming both.
    const Ran both = nitro_cli(plan + "--cpu-moe --n-cpu-moe 2");
    EXPECT_NE(both.status, 0) << both.out;
    EXPECT_TRUE(has(both.out, "--cpu-moe excludes --n-cpu-moe")) << both.out;
    EXPECT_EQ(nitro_cli(plan + "--n-cpu-moe 2").status, 0) << "either alone still plans";
}

TEST(CliErrors, SimAndRenderOnlyMessagesNameWhatIsWrong) {
    // Found by the second fresh-user trial: "-u 0" said 0 was outside a range that holds it, "nan"
    // GiB was called negative, and a bad record under --render-only was blamed on --append.
    const std::string dir = test::temp_dir("cli-sim-msgs");
    ASSERT_EQ(nitro_cli("trace synth -m " + kModel + " -o " + dir + "/g.nmtr --prompt 4 --decode 4").status, 0);
    Ran r = nitro_cli("sim " + dir + "/g.nmtr -u 0");
    EXPECT_EQ(r.status, kValidationError) << r.out;
    EXPECT_TRUE(has(r.out, "--ubatch: must be at least 1, got 0")) << r.out;
    r = nitro_cli("sim " + dir + "/g.nmtr --vram-gib nan");
    EXPECT_EQ(r.status, 1) << r.out;
    EXPECT_TRUE(has(r.out, "error: VRAM budget nan GiB must be a finite number >= 0")) << r.out;
    std::filesystem::create_directories(dir + "/sweep");
    std::ofstream(dir + "/sweep/records.jsonl") << "garbage\n";
    r = nitro_cli("bench -o " + dir + "/sweep --render-only");
    EXPECT_EQ(r.status, 1) << r.out;
    EXPECT_TRUE(has(r.out, "error: --render-only: " + dir + "/sweep/records.jsonl:1 is not a nitro bench record")) << r.out;
}

TEST(CliErrors, InspectListingsExcludeEachOtherAndMetadataHasJson) {
    // Found by the second fresh-user trial: --metadata --json printed text, and of --tensors,
    // --metadata and --dump only one was printed, silently.
    Ran r = nitro_cli("inspect " + kModel + " --metadata --json");
    ASSERT_EQ(r.status, 0) << r.out;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    ASSERT_TRUE(j.is_array());
    bool arch = false, vocab = false;
    for (const auto& e : j) {
        if (e["key"] == "general.architecture") arch = e["type"] == "string" && e["value"] == "gpt-oss";
        if (e["key"] == "tokenizer.ggml.tokens")
            vocab = e["value"]["element_type"] == "string" && e["value"]["n"].get<int64_t>() > 1000 &&
                    e["value"]["first"].size() == 5;
    }
    EXPECT_TRUE(arch) << r.out.substr(0, 400);
    EXPECT_TRUE(vocab) << "arrays are {element_type, n, first}";
    r = nitro_cli("inspect " + kModel + " --tensors --metadata");
    EXPECT_EQ(r.status, static_cast<int>(CLI::ExitCodes::ExcludesError)) << r.out;
    EXPECT_TRUE(has(r.out, "--tensors excludes --metadata")) << r.out;
    r = nitro_cli("inspect " + kModel + " --dump token_embd.weight --tensors");
    EXPECT_EQ(r.status, static_cast<int>(CLI::ExitCodes::ExcludesError)) << r.out;
    r = nitro_cli("inspect " + kModel + " --dump ''");
    EXPECT_EQ(r.status, kValidationError) << r.out;
    EXPECT_TRUE(has(r.out, "--dump: give a tensor name")) << r.out;
}

TEST(CliErrors, BenchKernelPoolTooSmallStatesItsUnits) {
    const Ran r =
        nitro_cli("bench -m " + kModel + " -t 1 --kernels q4_k --kernel-pool 0.0001 --kernel-seconds 0.01 --no-engine");
    EXPECT_EQ(r.status, 1) << r.out;
    // 0.0001 GiB = 107374 bytes; a 256x256 Q4_K expert takes 3 x 36,864 bytes.
    EXPECT_TRUE(has(r.out,
                    "error: bench: a kernel pool of 104.86 KiB (107374 bytes) holds only 0 Q4_K experts of 256x256 "
                    "(108.00 KiB each)"))
        << r.out;
}

TEST(CliErrors, BenchBufferLargerThanTheMemoryIsRefusedBeforeTouchingIt) {
    // 1 PiB (1048576 GiB) of kernel pool or read probe: refused with the sizes, not ended by the OOM killer (137).
    Ran r = nitro_cli("bench -m " + kModel + " -t 1 --kernels q4_k --kernel-pool 1048576 --kernel-seconds 0.01 --no-engine");
    EXPECT_EQ(r.status, 1) << r.out;
    EXPECT_TRUE(has(r.out, "error: bench: a buffer of 1048576.00 GiB is more than the ")) << r.out;
    EXPECT_TRUE(has(r.out, "of memory available now; lower --kernel-pool or --read-probe")) << r.out;
    const std::string dir = test::temp_dir("cli-read-probe");
    r = nitro_cli("bench -m " + kModel + " -t 1 -o " + dir + "/sweep --modes cpu --ctx 64 -n 1 --read-probe 1073741824");
    EXPECT_EQ(r.status, 1) << r.out;
    EXPECT_TRUE(has(r.out, "error: bench: a buffer of 1048576.00 GiB is more than the ")) << r.out;
}

TEST(CliErrors, BenchRenderOnlyNeedsNoModelAndOtherRunsTakeTheEmbeddedOne) {
    const std::string dir = test::temp_dir("cli-render-only");
    // No -m with --render-only: the command gets as far as the records (none here), as the help says.
    Ran r = nitro_cli("bench -o " + dir + " --render-only");
    EXPECT_EQ(r.status, 1) << r.out;
    EXPECT_TRUE(has(r.out, "error: --render-only: " + dir + "/records.jsonl does not exist")) << r.out;
    // Other runs without -m: the embedded model, as every command that takes -m.
    r = nitro_cli("bench -t 1 --no-engine --kernels none --kernel-tokens 1 --json");
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_EQ(nlohmann::json::parse(r.out)["model"], kModel) << r.out;
}

TEST(CliErrors, RunSamplingFlagsHaveTheServersBounds) {
    const std::pair<std::string, std::string> cases[] = {
        {"--temp -1", "--temp: must be between 0 and 2, got -1"},
        {"--temp nan", "--temp: must be between 0 and 2, got nan"},
        {"--temp 2.5", "--temp: must be between 0 and 2, got 2.5"},
        {"--top-p 2", "--top-p: must be between 0 and 1, got 2"},
        {"--top-p -1", "--top-p: must be between 0 and 1, got -1"},
        {"--top-p nan", "--top-p: must be between 0 and 1, got nan"},
        {"--top-k -1", "--top-k: must be at least 0, got -1"},
        {"--min-p 5", "--min-p: must be between 0 and 1, got 5"},
        {"--min-p -0.1", "--min-p: must be between 0 and 1, got -0.1"},
    };
    for (const auto& [args, message] : cases) {
        const Ran r = nitro_cli("run -p x -n 1 -t 1 " + args);
        EXPECT_EQ(r.status, kValidationError) << args << "\n" << r.out;
        EXPECT_TRUE(has(r.out, message)) << args << "\n" << r.out;
    }
    // The bounds themselves are accepted.
    const Ran ok = nitro_cli("run -p x -n 1 -t 1 --temp 2 --top-p 0 --min-p 1 --top-k 0 --seed 1");
    EXPECT_EQ(ok.status, 0) << ok.out;
}

TEST(CliErrors, RunPromptIdsRejectsAnEmptyItem) {
    Ran r = nitro_cli("run -n 1 -t 1 --prompt-ids 1,,2");
    EXPECT_EQ(r.status, 1) << r.out;
    EXPECT_TRUE(has(r.out, "error: --prompt-ids '1,,2': item 2 is empty")) << r.out;
    r = nitro_cli("run -n 1 -t 1 --prompt-ids 1,x");
    EXPECT_EQ(r.status, 1) << r.out;
    EXPECT_TRUE(has(r.out, "error: --prompt-ids '1,x': item 2 ('x') is not a token id")) << r.out;
    r = nitro_cli("run -n 1 -t 1 --json --prompt-ids 1,2,3");
    EXPECT_EQ(r.status, 0) << r.out;
    EXPECT_TRUE(has(r.out, "\"prompt_ids\":[1,2,3]")) << r.out;
}

TEST(CliErrors, RunWarnsWhenTheContextIsCapped) {
    const Ran r = nitro_cli("run -p x -n 1 -t 1 -c 100000");
    EXPECT_EQ(r.status, 0) << r.out;
    EXPECT_TRUE(has(r.out, "warning: -c 100000 is above the model's training context; using 1024 tokens")) << r.out;
    EXPECT_FALSE(has(nitro_cli("run -p x -n 1 -t 1 -c 512").out, "warning: -c")) << "no warning below the model's context";
}

TEST(CliErrors, RunSaysWhatCanMakeRoomInTheContext) {
    // The embedded model's training context is 1,024 tokens, the most -c gives: there only the
    // prompt or -n can change; below it -c can too.
    Ran r = nitro_cli("run -p x -n 2000 -t 1");
    EXPECT_EQ(r.status, 1) << r.out;
    EXPECT_TRUE(has(r.out,
                    "error: the prompt (1 token) plus 2000 generated tokens do not fit the context of 1024 tokens (the "
                    "model's training context, the most -c gives): shorten the prompt or lower -n"))
        << r.out;
    r = nitro_cli("run -p x -n 600 -c 512 -t 1");
    EXPECT_EQ(r.status, 1) << r.out;
    EXPECT_TRUE(has(r.out,
                    "error: the prompt (1 token) plus 600 generated tokens do not fit the context of 512 tokens (-c; "
                    "the model's training context is 1024): raise -c, shorten the prompt or lower -n"))
        << r.out;
    // One generated token comes from the prompt's pass: no decode rate to give.
    r = nitro_cli("run -p x -n 1 -t 1");
    EXPECT_EQ(r.status, 0) << r.out;
    EXPECT_TRUE(has(r.out, "prompt: 1 token, ")) << r.out;
    EXPECT_TRUE(has(r.out, "generated: 1 token, no decode step | TTFT ")) << r.out;
    r = nitro_cli("run -p 'import os' -n 2 -t 1");
    EXPECT_TRUE(has(r.out, "generated: 2 tokens, ")) << r.out;
    EXPECT_FALSE(has(r.out, "no decode step")) << r.out;
}

TEST(CliErrors, TraceSynthShapeCountsAreAtLeastOne) {
    // 0 was taken for "not given" and answered with "give the model (-m MODEL) or its shape"
    const std::string out = test::temp_dir("cli-trace-synth") + "/t.nmtr";
    for (const char* flag : {"--layers", "--experts", "--used"}) {
        std::string args = "trace synth -o " + out + " --layers 2 --experts 8 --used 2";
        args.replace(args.find(std::string(flag) + " "), std::string(flag).size() + 2, std::string(flag) + " 0");
        const Ran r = nitro_cli(args);
        EXPECT_EQ(r.status, kValidationError) << args << "\n" << r.out;
        EXPECT_TRUE(has(r.out, std::string(flag) + ": must be at least 1, got 0")) << args << "\n" << r.out;
    }
    EXPECT_EQ(nitro_cli("trace synth -o " + out + " --layers 2 --experts 8 --used 2").status, 0);
}

TEST(CliErrors, RunEndsTheTextBeforeTheStatsLine) {
    // Greedy: the 8 tokens after "import os" end without a newline, so the final "\n" must reach the
    // file before the stats written to stderr.
    const Ran r = nitro_cli("run -p 'import os' -n 8 -t 1");
    EXPECT_EQ(r.status, 0) << r.out;
    const size_t stats = r.out.find("prompt: ");
    ASSERT_NE(stats, std::string::npos) << r.out;
    const size_t line = r.out.rfind('\n', stats);
    ASSERT_NE(line, std::string::npos) << r.out;
    EXPECT_EQ(r.out[line + 1], '[') << "the stats line starts on its own line:\n" << r.out;
}

TEST(CliErrors, GpuPlacementFlagsWarnOnTheCpuEngine) {
    // (--cpu-moe and --n-cpu-moe exclude each other: PlanAndPlacementNumbersAreChecked)
    const std::string hot = test::temp_dir("cli-hot-set") + "/hot.json";
    std::ofstream(hot) << "{}\n";  // read only by the GPU engine; here it must merely exist
    Ran r = nitro_cli("run --mode cpu -p x -n 1 -t 1 --n-cpu-moe 3 -ot x=GPU --hot-set " + hot);
    EXPECT_EQ(r.status, 0) << r.out;
    EXPECT_TRUE(has(r.out,
                    "warning: --n-cpu-moe, -ot/--override-tensor and --hot-set have no effect on the CPU engine "
                    "(--mode cpu)"))
        << r.out;
    r = nitro_cli("run --mode cpu -p x -n 1 -t 1 --cpu-moe");
    EXPECT_EQ(r.status, 0) << r.out;
    EXPECT_TRUE(has(r.out, "warning: --cpu-moe has no effect on the CPU engine")) << r.out;
    r = nitro_cli("run --mode cpu -p x -n 1 -t 1 --gpu 5 --vram-budget 12.5");
    EXPECT_EQ(r.status, 0) << r.out;
    EXPECT_TRUE(has(r.out, "warning: --gpu 5 and --vram-budget 12.5 have no effect on the CPU engine (--mode cpu)")) << r.out;
    // A hot-set file that is not there is an error on any engine.
    r = nitro_cli("run --mode cpu -p x -n 1 -t 1 --hot-set /nonexistent/hot.json");
    EXPECT_EQ(r.status, 1) << r.out;
    EXPECT_TRUE(has(r.out, "error: --hot-set '/nonexistent/hot.json': cannot open: No such file or directory")) << r.out;
    EXPECT_FALSE(has(nitro_cli("run --mode cpu -p x -n 1 -t 1").out, "warning:")) << "no flags, no warning";
}

TEST(CliErrors, ThreadsAboveTheHardwareWarn) {
    // The warning comes first; the missing prompt file ends the run before 65536 threads start.
    const Ran r = nitro_cli("run -t 65536 -n 1 -f /nonexistent/prompt.txt");
    EXPECT_EQ(r.status, 1) << r.out;
    EXPECT_TRUE(has(r.out, "warning: -t 65536 is more than the ")) << r.out;
    EXPECT_TRUE(has(r.out, "hardware threads of this machine")) << r.out;
}

TEST(CliErrors, TokenizeChatTellsInvalidJsonFromAWrongShape) {
    const std::string dir = test::temp_dir("cli-chat-shape");
    std::ofstream(dir + "/bad.json") << "{bad";
    std::ofstream(dir + "/array.json") << R"([{"role": "user", "content": "hi"}])";
    std::ofstream(dir + "/messages.json") << R"({"messages": {"role": "user", "content": "hi"}})";
    const std::pair<std::string, std::string> cases[] = {
        {"bad.json", "is not valid JSON: [json.exception.parse_error.101]"},
        {"array.json", "holds a JSON array, not an object {\"messages\": [...]"},
        {"messages.json", ": \"messages\" is a JSON object, not an array of messages"},
    };
    for (const auto& [file, message] : cases) {
        const Ran r = nitro_cli("tokenize -m " + kModel + " --chat " + dir + "/" + file);
        EXPECT_EQ(r.status, 1) << file << "\n" << r.out;
        EXPECT_TRUE(has(r.out, "error: --chat: '" + dir + "/" + file + "' " + message) ||
                    has(r.out, "error: --chat: '" + dir + "/" + file + "'" + message))
            << file << "\n"
            << r.out;
    }
}

}  // namespace
}  // namespace nitro
