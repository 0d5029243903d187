// What the CLI and the server print, checked against hand-written expectations: the chat reply
// printer (reasoning dim on a terminal only), the server's request log line, progress figures.
#include "cli/chat_printer.h"
#include "cli/progress.h"
#include "server/request_log.h"

#include <gtest/gtest.h>

namespace nitro {
namespace {

ChatDelta delta(ChatDelta::Kind k, const std::string& text, const std::string& name = "") {
    ChatDelta d = make_delta(k, text);
    d.name = name;
    return d;
}

std::string print(bool terminal, const std::vector<ChatDelta>& deltas) {
    cli::ChatPrinter p(terminal);
    std::string out;
    for (const auto& d : deltas) out += p.delta(d);
    return out + p.end();
}

TEST(ChatPrinter, ReasoningIsDimOnATerminalAndPlainElsewhere) {
    using K = ChatDelta::Kind;
    const std::vector<ChatDelta> reply = {delta(K::REASONING, "The user says hi."), delta(K::REASONING, " Answer briefly."),
                                          delta(K::CONTENT, "Hello"), delta(K::CONTENT, "!")};
    EXPECT_EQ(print(true, reply), "\x1b[2mThe user says hi. Answer briefly.\x1b[0m\nHello!\n");
    EXPECT_EQ(print(false, reply), "The user says hi. Answer briefly.\nHello!\n");
    // Content only: no escape codes at all, one final line break.
    EXPECT_EQ(print(true, {delta(K::CONTENT, "x = 1\n")}), "x = 1\n");
    // A reply cut inside its reasoning still resets the attribute.
    EXPECT_EQ(print(true, {delta(K::REASONING, "hmm")}), "\x1b[2mhmm\x1b[0m\n");
}

TEST(ChatPrinter, ToolCallsAreNamed) {
    using K = ChatDelta::Kind;
    EXPECT_EQ(print(false, {delta(K::CONTENT, "Let me check."), delta(K::TOOL_CALL_BEGIN, "", "get_weather"),
                            delta(K::TOOL_CALL_ARGUMENTS, "{\"city\":"), delta(K::TOOL_CALL_ARGUMENTS, "\"Paris\"}")}),
              "Let me check.\n[tool call get_weather] {\"city\":\"Paris\"}\n");
}

TEST(RequestLog, OneLineWithTheJobsFigures) {
    server::JobStats s;
    s.n_prompt = 812;
    s.n_reused = 768;
    s.n_generated = 65;
    s.queue_ms = 1.5;
    s.prompt_ms = 33.7;
    s.decode_ms = 1600;  // 64 decode steps after the first token: 40.0 tok/s
    EXPECT_EQ(server::request_log_line("POST", "/v1/chat/completions", 200, &s),
              "POST /v1/chat/completions 200 | prompt 812 tokens (768 cached) | completion 65 tokens | TTFT 35.2 ms | "
              "40.0 tok/s | 1.64 s");
    EXPECT_EQ(server::request_log_line("GET", "/health", 200, nullptr), "GET /health 200");
    server::JobStats one;
    one.n_prompt = 1;
    one.n_generated = 1;
    one.prompt_ms = 2;
    EXPECT_EQ(server::request_log_line("POST", "/v1/completions", 200, &one),
              "POST /v1/completions 200 | prompt 1 token (0 cached) | completion 1 token | TTFT 2.0 ms | 0.00 s");
}

TEST(Progress, FiguresSayRateAndTimeLeft) {
    // 3 GiB of 12 GiB in 2 s: 1.5 GiB/s, 9 GiB left: 6 s.
    const uint64_t gib = 1ull << 30;
    EXPECT_EQ(cli::progress_figures(3 * gib, 12 * gib, 2.0), " 25% (3.00 GiB of 12.00 GiB, 1.50 GiB/s, 6 s left)");
    EXPECT_EQ(cli::progress_figures(12 * gib, 12 * gib, 4.0), "100% (12.00 GiB of 12.00 GiB, 3.00 GiB/s)");
    EXPECT_EQ(cli::progress_figures(0, 12 * gib, 0.0), "  0% (0 B of 12.00 GiB)");
}

}  // namespace
}  // namespace nitro
