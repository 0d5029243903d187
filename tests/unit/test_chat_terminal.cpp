// `nitro chat` and `nitro run -cnv` in a pseudo-terminal (forkpty), as a user types: two turns,
// /stats, /reset, Ctrl-D. The replies are checked against an independent path: the conversation
// rendered by `nitro tokenize --chat` and continued greedily by `nitro run --prompt-ids` (a fresh
// engine, no cache), and the cached-token count of the second turn against the longest common
// prefix of the first turn's tokens (prompt + reply) and the second prompt, computed here.
#include "gguf_bytes.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <poll.h>
#include <pty.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

namespace nitro {
namespace {

using json = nlohmann::ordered_json;

const std::string kModel = std::string(NITRO_SOURCE_DIR) + "/models/tiny-moe-pystd.gguf";
constexpr int kReplyTokens = 24;

/// A program running in a pseudo-terminal: what it printed (\r removed), and input typed to it.
class Pty {
public:
    explicit Pty(const std::vector<std::string>& args) {
        winsize ws{};
        ws.ws_row = 40;
        ws.ws_col = 200;
        pid_ = forkpty(&fd_, nullptr, nullptr, &ws);
        if (pid_ == 0) {
            std::vector<char*> argv;
            for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
            argv.push_back(nullptr);
            execv(argv[0], argv.data());
            _exit(127);
        }
    }
    ~Pty() {
        if (pid_ > 0 && !reaped_) {
            kill(pid_, SIGKILL);
            waitpid(pid_, nullptr, 0);
        }
        if (fd_ >= 0) close(fd_);
    }
    bool started() const { return pid_ > 0; }
    void type(const std::string& s) { ASSERT_EQ(write(fd_, s.data(), s.size()), static_cast<ssize_t>(s.size())); }
    /// Reads until `marker` appears after the read position (within 60 s); returns what came
    /// before it and moves past it.
    std::string until(const std::string& marker) {
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
        for (;;) {
            const size_t at = out_.find(marker, pos_);
            if (at != std::string::npos) {
                std::string before = out_.substr(pos_, at - pos_);
                pos_ = at + marker.size();
                return before;
            }
            if (std::chrono::steady_clock::now() > deadline || !read_some()) {
                ADD_FAILURE() << "no '" << marker << "' in the output:\n" << out_;
                return "";
            }
        }
    }
    /// Waits for the exit (reading what is left); the exit status, or 128 + signal.
    int wait() {
        while (read_some()) {
        }
        int st = 0;
        waitpid(pid_, &st, 0);
        reaped_ = true;
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    }
    const std::string& output() const { return out_; }

private:
    bool read_some() {
        pollfd p{fd_, POLLIN, 0};
        if (poll(&p, 1, 60000) <= 0) return false;
        char buf[4096];
        const ssize_t n = read(fd_, buf, sizeof buf);
        if (n <= 0) return false;  // EIO once the child has closed the terminal
        for (ssize_t i = 0; i < n; ++i)
            if (buf[i] != '\r') out_.push_back(buf[i]);
        return true;
    }
    pid_t pid_ = -1;
    int fd_ = -1;
    bool reaped_ = false;
    std::string out_;
    size_t pos_ = 0;
};

std::vector<int32_t> chat_ids(const json& messages) {
    const std::string file = test::temp_dir("chat-terminal") + "/conv.json";
    std::ofstream(file) << json{{"messages", messages}}.dump();
    return json::parse(test::run_command(std::string(NITRO_BINARY) + " tokenize -m " + kModel + " --json --chat " + file))["ids"]
        .get<std::vector<int32_t>>();
}

/// Greedy continuation of `ids` by a fresh `nitro run`: {ids, text}.
json run_greedy(const std::vector<int32_t>& ids) {
    std::string list;
    for (int32_t id : ids) {  // (appends: GCC 12 warns -Wrestrict on "literal" + std::string&&)
        if (!list.empty()) list += ',';
        list += std::to_string(id);
    }
    return json::parse(test::run_command(std::string(NITRO_BINARY) + " run -m " + kModel + " -t 2 --temp 0 --json -n " +
                                         std::to_string(kReplyTokens) + " --prompt-ids " + list));
}

std::string trim_newlines(std::string s) {
    while (!s.empty() && s.back() == '\n') s.pop_back();
    return s;
}

struct Stats {
    long prompt = -1, cached = -1, reply = -1;
};
Stats parse_stats(const std::string& line) {
    static const std::regex re(R"(last reply: prompt (\d+) tokens? \((\d+) cached, \d+ evaluated\), reply (\d+) tokens?)");
    std::smatch m;
    Stats s;
    if (std::regex_search(line, m, re)) s = {std::stol(m[1]), std::stol(m[2]), std::stol(m[3])};
    return s;
}

/// One user turn: types `text`, returns the reply shown before the next prompt.
std::string turn(Pty& t, const std::string& text) {
    t.type(text + "\n");
    t.until(text + "\n");  // the terminal's echo of the line
    return t.until("\n> ");
}

TEST(ChatTerminal, TwoTurnsStatsResetAndCtrlD) {
    Pty t({NITRO_BINARY, "chat", "-m", kModel, "-t", "2", "--temp", "0", "-n", std::to_string(kReplyTokens)});
    ASSERT_TRUE(t.started());
    const std::string banner = t.until("> ");
    EXPECT_NE(banner.find("nitro chat: " + kModel + " (harmony chat format)"), std::string::npos) << banner;

    // Turn 1, against a fresh greedy run of the same rendering.
    json conv = json::array({{{"role", "user"}, {"content", "Hello there"}}});
    const std::vector<int32_t> prompt1 = chat_ids(conv);
    const json ref1 = run_greedy(prompt1);
    const std::string reply1 = turn(t, "Hello there");
    ASSERT_EQ(ref1["text"].get<std::string>().find("<|"), std::string::npos) << "a reply with harmony markup: " << ref1["text"];
    EXPECT_EQ(trim_newlines(reply1), trim_newlines(ref1["text"].get<std::string>()));
    t.type("/stats\n");
    t.until("/stats\n");
    const Stats s1 = parse_stats(t.until("\n> "));
    EXPECT_EQ(s1.prompt, static_cast<long>(prompt1.size()));
    EXPECT_EQ(s1.cached, 0);
    EXPECT_EQ(s1.reply, static_cast<long>(ref1["ids"].size()));

    // Turn 2: the history is kept, and the first turn's cache is reused up to where the prompts part.
    conv.push_back({{"role", "assistant"}, {"content", ref1["text"]}});
    conv.push_back({{"role", "user"}, {"content", "And then?"}});
    const std::vector<int32_t> prompt2 = chat_ids(conv);
    const json ref2 = run_greedy(prompt2);
    const std::string reply2 = turn(t, "And then?");
    EXPECT_EQ(trim_newlines(reply2), trim_newlines(ref2["text"].get<std::string>()));
    std::vector<int32_t> cached = prompt1;
    for (const auto& id : ref1["ids"]) cached.push_back(id.get<int32_t>());
    size_t common = 0;
    while (common < cached.size() && common < prompt2.size() && cached[common] == prompt2[common]) ++common;
    t.type("/stats\n");
    t.until("/stats\n");
    const Stats s2 = parse_stats(t.until("\n> "));
    EXPECT_EQ(s2.prompt, static_cast<long>(prompt2.size()));
    EXPECT_EQ(s2.cached, static_cast<long>(common));
    EXPECT_GT(s2.cached, static_cast<long>(prompt1.size()) / 2);  // the system prompt and the first turn, at least

    // /reset: the same first message gets the same reply, from a one-message prompt again.
    t.type("/reset\n");
    t.until("/reset\n");
    EXPECT_EQ(t.until("\n> "), "conversation reset");
    const std::string reply3 = turn(t, "Hello there");
    EXPECT_EQ(reply3, reply1);
    t.type("/stats\n");
    t.until("/stats\n");
    EXPECT_EQ(parse_stats(t.until("\n> ")).prompt, static_cast<long>(prompt1.size()));

    // Ctrl-D at the prompt: a clean exit.
    t.type("\x04");
    EXPECT_EQ(t.wait(), 0) << t.output();
}

TEST(ChatTerminal, RunWithoutAPromptOnATerminalIsAChatAndCnvToo) {
    for (const std::vector<std::string>& extra : {std::vector<std::string>{}, std::vector<std::string>{"-cnv"}}) {
        std::vector<std::string> args = {NITRO_BINARY, "run", "-m", kModel, "-t", "2", "--temp", "0", "-n", std::to_string(kReplyTokens)};
        args.insert(args.end(), extra.begin(), extra.end());
        Pty t(args);
        ASSERT_TRUE(t.started());
        EXPECT_NE(t.until("> ").find("nitro chat: "), std::string::npos);
        const json ref = run_greedy(chat_ids(json::array({{{"role", "user"}, {"content", "Hello there"}}})));
        EXPECT_EQ(trim_newlines(turn(t, "Hello there")), trim_newlines(ref["text"].get<std::string>()));
        t.type("\x04");
        EXPECT_EQ(t.wait(), 0) << t.output();
    }
}

}  // namespace
}  // namespace nitro
