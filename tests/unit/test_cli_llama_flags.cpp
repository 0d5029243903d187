// The real `nitro` binary on llama.cpp's spellings (docs/cli.md "Coming from llama.cpp") and on the
// defaults every command shares: no multi-letter flag is split into letters, each flag does what
// the table says, a flag nitro lacks gets "nitro has no X; ...", and the cheap checks of `nitro
// serve` come before the model is opened.
#include "gguf_bytes.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>

namespace nitro {
namespace {

const std::string kModel = std::string(NITRO_SOURCE_DIR) + "/models/tiny-moe-pystd.gguf";

struct Ran {
    int status = -1;
    std::string out;  ///< stdout and stderr together
};

/// `nitro ARGS` with stdin from /dev/null (never a terminal), stdout and stderr into one file.
Ran nitro_cli(const std::string& args) {
    static const std::string log = test::temp_dir("cli-llama-flags") + "/log";
    const int rc = std::system((std::string(NITRO_BINARY) + " " + args + " </dev/null >" + log + " 2>&1").c_str());
    Ran r;
    r.status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
    std::ifstream f(log);
    std::stringstream ss;
    ss << f.rdbuf();
    r.out = ss.str();
    return r;
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(CliLlamaFlags, LlamaCppCommandLinesRun) {
    // What llama.cpp users type; each must run (exit 0) and generate, none split into letters.
    const std::string run = "run -m " + kModel + " -t 2 -p hello ";
    const char* lines[] = {
        "-n 3 -ngl 99 -fa on -c 512",
        "-n 3 -ngl 0 -fa",  // -fa alone: older llama.cpp
        "-n 3 -fa -ngl all",
        "-n 3 -ub 64 -b 32",
        "-n 3 -ctk f16 -ctv f16 --jinja",
        "-n 3 -s 42 --temp 0.7 --top-k 20 --top-p 0.9 --min-p 0.05",
        "--predict 3 -cmoe",
        "-n 3 -tb 2",
        "-n 3 -cmoe -fa -ngl 99",  // a flag, then llama.cpp spellings: nothing taken as the flag's value
    };
    for (const char* l : lines) {
        const Ran r = nitro_cli(run + l);
        EXPECT_EQ(r.status, 0) << l << "\n" << r.out;
        EXPECT_TRUE(has(r.out, "generated: 3 tokens")) << l << "\n" << r.out;
    }
}

TEST(CliLlamaFlags, FlagsDoWhatTheTableSays) {
    // -ngl 0 against --mode gpu: an error naming both.
    Ran r = nitro_cli("run -p hi -n 1 -ngl 0 --mode gpu");
    EXPECT_EQ(r.status, 1);
    EXPECT_TRUE(has(r.out, "error: -ngl 0 keeps every layer off the GPU, but --mode gpu asks for the GPU")) << r.out;
    // -fa off and a -tb other than -t: warnings, and the run goes on.
    r = nitro_cli("run -p hi -n 1 -t 2 -fa off -tb 3");
    EXPECT_EQ(r.status, 0) << r.out;
    EXPECT_TRUE(has(r.out, "warning: -fa off changes nothing: nitro's attention is always fused")) << r.out;
    EXPECT_TRUE(has(r.out, "warning: -tb 3 is ignored: nitro runs prompts and decode on one team of -t threads (2 here)")) << r.out;
    // -ctk/-ctv: f16 only for now; q8_0 and q4_0 "not yet"; others an error naming the flag.
    r = nitro_cli("run -p hi -n 1 -ctk q8_0");
    EXPECT_EQ(r.status, 1);
    EXPECT_TRUE(has(r.out, "error: -ctk/--cache-type-k q8_0: a q8_0 K/V cache is not yet supported")) << r.out;
    r = nitro_cli("run -p hi -n 1 -ctv q4_0");
    EXPECT_TRUE(has(r.out, "error: -ctv/--cache-type-v q4_0: a q4_0 K/V cache is not yet supported")) << r.out;
    r = nitro_cli("run -p hi -n 1 -ctk bf16");
    EXPECT_TRUE(has(r.out, "error: -ctk/--cache-type-k bf16: nitro's K/V cache is f16")) << r.out;
    // -n -1: until the end of generation or a full context (-c 48).
    r = nitro_cli("run -m " + kModel + " -t 2 -c 48 -p hello -n -1 --json --ignore-eos");
    ASSERT_EQ(r.status, 0) << r.out;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["prompt_ids"].size() + j["ids"].size(), 48u) << r.out;
    // -sys with --chat: the prompt is the conversation [system, user] as `nitro tokenize --chat` renders it.
    const std::string conv = test::temp_dir("cli-sys") + "/conv.json";
    std::ofstream(conv) << R"({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]})";
    const auto want = nlohmann::json::parse(test::run_command(std::string(NITRO_BINARY) + " tokenize --json --chat " + conv));
    r = nitro_cli("run -t 2 --chat -sys 'Be brief.' -p hi -n 1 --json");
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_EQ(nlohmann::json::parse(r.out)["prompt_ids"], want["ids"]);
}

TEST(CliLlamaFlags, FlagsNitroLacksSayWhatToUse) {
    const std::pair<std::string, std::string> cases[] = {
        {"run -p hi -sm layer", "error: nitro has no -sm; nitro runs on one GPU (--gpu N)"},
        {"run -p hi --chat-template-file t.jinja", "error: nitro has no --chat-template-file; nitro has no Jinja engine"},
        {"run -p hi --repeat-penalty 1.1", "error: nitro has no --repeat-penalty; nitro's samplers are --temp, --top-k, --top-p and --min-p"},
        {"run -p hi -np 2", "error: nitro run has no -np (--parallel); nitro serve has it"},
        {"serve -nkvo", "error: nitro has no -nkvo; the K/V cache stays with the attention"},
        {"serve -nocb", "error: nitro has no -nocb; use --parallel 1"},
        {"serve -cb --no-kv-offload", "error: nitro has no --no-kv-offload;"},
        {"tokenize -ngl 99 hi", "error: nitro tokenize has no -ngl (--n-gpu-layers); nitro run, nitro chat and nitro serve have it"},
    };
    for (const auto& [args, message] : cases) {
        const Ran r = nitro_cli(args);
        EXPECT_EQ(r.status, 1) << args << "\n" << r.out;
        EXPECT_TRUE(has(r.out, message)) << args << "\n" << r.out;
    }
}

TEST(CliLlamaFlags, EveryCommandDefaultsToTheEmbeddedModel) {
    // tokenize, inspect, plan and bench without -m: the embedded model, as run and serve.
    Ran r = nitro_cli("tokenize hello");
    EXPECT_EQ(r.status, 0) << r.out;
    EXPECT_EQ(r.out, test::run_command(std::string(NITRO_BINARY) + " tokenize -m " + kModel + " hello"));
    r = nitro_cli("inspect");
    EXPECT_EQ(r.status, 0) << r.out;
    EXPECT_TRUE(has(r.out, "gpt-oss")) << r.out;
    EXPECT_EQ(r.out, test::run_command(std::string(NITRO_BINARY) + " inspect " + kModel));
    r = nitro_cli("plan --vram-budget 1");
    EXPECT_EQ(r.status, 0) << r.out;
    EXPECT_TRUE(has(r.out, "8 layers, 64 experts, 4 used per token")) << r.out;
    // bare `nitro run` off a terminal: the default prompt, said on stderr.
    r = nitro_cli("run -n 2 -t 2");
    EXPECT_EQ(r.status, 0) << r.out;
    EXPECT_TRUE(has(r.out, "nitro run: no prompt given (-p TEXT, -f FILE, or -cnv for a chat): completing \"def read_config(path):\""))
        << r.out;
    // an explicit empty prompt is still an error
    r = nitro_cli("run -p '' -n 2");
    EXPECT_TRUE(has(r.out, "error: the prompt is empty")) << r.out;
}

TEST(CliLlamaFlags, PlanSaysLayerForOneLayerAndTakesAPresetWithoutItsArchitecture) {
    // --n-cpu-moe 1 sets layer 0 apart from layers 1-7.
    Ran r = nitro_cli("plan --vram-budget 1 --n-cpu-moe 1");
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_TRUE(has(r.out, "  layer   0       0 of 64 resident")) << r.out;
    EXPECT_TRUE(has(r.out, "  layers  1-7    64 of 64 resident")) << r.out;
    EXPECT_FALSE(has(r.out, "0-0")) << r.out;
    // One expert in the same unit as nitro inspect's "per expert per layer" (38.25 KiB, models/README.md).
    EXPECT_TRUE(has(r.out, "one expert 38.25 KiB (MXFP4)")) << r.out;
    EXPECT_TRUE(has(nitro_cli("inspect").out, "per expert per layer         38.25 KiB")) << r.out;
    r = nitro_cli("plan --synth gpt-oss-120b --vram-budget 24");
    EXPECT_EQ(r.status, 0) << r.out;
    EXPECT_TRUE(has(r.out, "36 layers, 128 experts, 4 used per token; one expert 12.61 MiB (MXFP4)")) << r.out;
    EXPECT_EQ(nitro_cli("plan --synth gpt-oss:gpt-oss-120b:q8_0 --vram-budget 24").status, 0);
    r = nitro_cli("plan --synth tiny --vram-budget 1");
    EXPECT_EQ(r.status, 1);
    EXPECT_TRUE(has(r.out, "error: --synth 'tiny': that preset exists for several architectures (gpt-oss, qwen3moe, qwen3next, "
                           "qwen35moe); name one, e.g. gpt-oss:tiny")) << r.out;
}

/// A listening TCP socket on 127.0.0.1 (any free port); its port.
int listen_somewhere(int& fd) {
    fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(fd, 1) != 0) return -1;
    socklen_t len = sizeof a;
    getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    return ntohs(a.sin_port);
}

TEST(CliLlamaFlags, ServeChecksThePortAndTheModeBeforeOpeningTheModel) {
    int fd = -1;
    const int port = listen_somewhere(fd);
    ASSERT_GT(port, 0);
    // The model does not even exist: the port is checked first, and at once.
    const auto t0 = std::chrono::steady_clock::now();
    Ran r = nitro_cli("serve -m /nonexistent/model.gguf --port " + std::to_string(port));
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    close(fd);
    EXPECT_EQ(r.status, 1) << r.out;
    EXPECT_TRUE(has(r.out, "error: cannot bind 127.0.0.1:" + std::to_string(port) + ": Address already in use")) << r.out;
    EXPECT_LT(s, 1.0);
    // Same with a real model: the error comes before any weight is read.
    EXPECT_TRUE(has(nitro_cli("serve -m " + kModel + " --port " + std::to_string(listen_somewhere(fd))).out,
                    "Address already in use"));
    close(fd);
#ifndef NITRO_HAS_CUDA
    r = nitro_cli("serve -m /nonexistent/model.gguf --port 0 --mode gpu");
    EXPECT_TRUE(has(r.out, "error: --mode gpu needs a build with the CUDA backend")) << r.out;
#endif
}

}  // namespace
}  // namespace nitro
