// Request replay of `nitro bench -o DIR --requests FILE` (bench/bench_requests.h,
// docs/bench.md): the request file, URLs, the SSE parser, the timing of a stream against a
// scripted server with known delays, the weighted rates against a hand computation, a peer URL
// that is down (a quick, clear error), and the records of a replay against nitro serve on the
// embedded model, with nitro serve as the peer (A B B A, ratio from the pair). Only loopback
// addresses are used.
#include "gguf_bytes.h"

#include "core/error.h"
#include "bench/bench_requests.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <chrono>
#include <cmath>
#include <fstream>
#include <netinet/in.h>
#include <sstream>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace nitro {
namespace {

const std::string kEmbedded = std::string(NITRO_SOURCE_DIR) + "/models/tiny-moe-pystd.gguf";

std::string write_text(const std::string& path, const std::string& text) {
    std::ofstream f(path);
    f << text;
    return path;
}

std::string read_text(const std::string& p) {
    std::ifstream f(p);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

std::vector<nlohmann::json> read_records(const std::string& dir) {
    std::vector<nlohmann::json> r;
    std::ifstream f(dir + "/records.jsonl");
    for (std::string line; std::getline(f, line);) r.push_back(nlohmann::json::parse(line));
    return r;
}

int run_status(const std::string& cmd, const std::string& log) {
    const int rc = std::system((cmd + " >" + log + " 2>&1").c_str());
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/// A loopback port nothing listens on (bound and released; nothing else binds it in the test).
int free_port() {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    socklen_t len = sizeof a;
    getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    close(fd);
    return ntohs(a.sin_port);
}

double secs(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// ---- the pure parts ----

TEST(BenchRequests, ReadsBodiesWrappersAndConversations) {
    const std::string dir = test::temp_dir("req-file");
    const std::string f = write_text(dir + "/r.jsonl", R"({"model":"x","messages":[{"role":"user","content":"hi"}],"max_tokens":4}

{"custom_id":"c1","url":"/v1/completions","body":{"prompt":"def f(","max_tokens":3}}
{"conversation":"a","body":{"messages":[{"role":"user","content":"1"}]}}
{"conversation":"a","endpoint":"chat/completions","body":{"messages":[{"role":"user","content":"1"},{"role":"assistant","content":"2"},{"role":"user","content":"3"}]}}
)");
    const auto r = read_saved_requests(f);
    ASSERT_EQ(r.size(), 4u);
    EXPECT_EQ(r[0].endpoint, "/v1/chat/completions");
    EXPECT_EQ(r[0].line, 1);
    EXPECT_EQ(r[0].conversation, "line 1");
    EXPECT_EQ(r[1].endpoint, "/v1/completions");
    EXPECT_EQ(r[1].id, "c1");
    EXPECT_EQ(r[1].line, 3);
    EXPECT_EQ(r[2].conversation, "a");
    EXPECT_EQ(r[2].turn, 0);
    EXPECT_EQ(r[3].turn, 1);
    EXPECT_EQ(r[3].endpoint, "/v1/chat/completions");
    // The replayed body streams with usage; "model" is what the target wants (none: removed).
    HttpTarget t;
    const auto b = replay_body(r[0], t);
    EXPECT_EQ(b["stream"], true);
    EXPECT_EQ(b["stream_options"]["include_usage"], true);
    EXPECT_FALSE(b.contains("model"));
    t.model = "peer-model";
    EXPECT_EQ(replay_body(r[0], t)["model"], "peer-model");
    struct Bad {
        const char* text;
        const char* error;
    };
    for (const Bad& bad : {Bad{"{\"prompt\":\"a\"}\nnot json\n", "r2.jsonl:2: not valid JSON"},
                           Bad{"[1,2]\n", ":1: a request line must be a JSON object"},
                           Bad{"{\"max_tokens\":3}\n", "exactly one of \"messages\""},
                           Bad{"{\"prompt\":\"a\",\"messages\":[]}\n", "exactly one of"},
                           Bad{"{\"url\":\"/v1/embeddings\",\"body\":{\"prompt\":\"a\"}}\n", "is not /v1/chat/completions"},
                           Bad{"{\"url\":\"/v1/chat/completions\",\"body\":{\"prompt\":\"a\"}}\n", "does not match the body"},
                           Bad{"\n\n", "no requests"}}) {
        write_text(dir + "/r2.jsonl", bad.text);
        EXPECT_NE(test::error_of([&] { read_saved_requests(dir + "/r2.jsonl"); }).find(bad.error), std::string::npos) << bad.text;
    }
    EXPECT_NE(test::error_of([&] { read_saved_requests(dir + "/none.jsonl"); }).find("cannot open"), std::string::npos);
}

TEST(BenchRequests, ParsesHttpUrls) {
    const HttpTarget a = parse_http_url("http://127.0.0.1:8081/v1", "--peer-url");
    EXPECT_EQ(a.host, "127.0.0.1");
    EXPECT_EQ(a.port, 8081);
    EXPECT_EQ(a.prefix, "");
    const HttpTarget b = parse_http_url("http://localhost/api/v1/", "--peer-url");
    EXPECT_EQ(b.port, 80);
    EXPECT_EQ(b.prefix, "/api");
    const HttpTarget c = parse_http_url("http://[::1]:9000", "--peer-url");
    EXPECT_EQ(c.host, "::1");
    EXPECT_EQ(c.port, 9000);
    EXPECT_NE(test::error_of([] { parse_http_url("https://127.0.0.1:1", "--peer-url"); }).find("https is not supported"),
              std::string::npos);
    EXPECT_NE(test::error_of([] { parse_http_url("127.0.0.1:8080", "--peer-url"); }).find("expected http://"), std::string::npos);
    EXPECT_NE(test::error_of([] { parse_http_url("http://:80", "--peer-url"); }).find("no host"), std::string::npos);
    EXPECT_NE(test::error_of([] { parse_http_url("http://h:99999", "--peer-url"); }).find("out of range"), std::string::npos);
    EXPECT_NE(test::error_of([] { parse_http_url("http://h:8x", "--peer-url"); }).find("not a number"), std::string::npos);
}

TEST(BenchRequests, SseParserSplitsEventsWhereverTheBytesBreak) {
    std::vector<std::pair<std::string, double>> ev;
    SseParser p([&](const std::string& d, double t) { ev.emplace_back(d, t); });
    const std::string s = ": comment\r\ndata: {\"a\":1}\r\n\r\nevent: x\ndata: line1\ndata: line2\n\ndata: [DONE]\n\n";
    // Byte by byte: an event is delivered with the time of the byte that completed it.
    for (size_t i = 0; i < s.size(); ++i) p.feed(&s[i], 1, static_cast<double>(i));
    ASSERT_EQ(ev.size(), 3u);
    EXPECT_EQ(ev[0].first, "{\"a\":1}");
    EXPECT_EQ(ev[0].second, static_cast<double>(s.find("\r\n\r\n") + 3));
    EXPECT_EQ(ev[1].first, "line1\nline2");
    EXPECT_EQ(ev[2].first, "[DONE]");
    SseParser q([&](const std::string& d, double t) { ev.emplace_back(d, t); });
    q.feed("data: tail", 10, 1.0);
    q.finish(2.0);  // an event without its blank line at the end of the stream
    ASSERT_EQ(ev.size(), 4u);
    EXPECT_EQ(ev[3].first, "tail");
}

TEST(BenchRequests, StreamEventsGiveTextTimesAndTokenCounts) {
    RequestTiming r;
    EXPECT_TRUE(apply_stream_event(R"({"choices":[{"delta":{"role":"assistant","content":""}}]})", 0.1, r));
    EXPECT_LT(r.first_text_s, 0);  // a role chunk is not generated text
    apply_stream_event(R"({"choices":[{"delta":{"reasoning_content":"think"}}]})", 0.5, r);
    apply_stream_event(R"({"choices":[{"delta":{"content":"a"}}]})", 0.75, r);
    apply_stream_event(R"({"choices":[{"delta":{"tool_calls":[{"index":0}]}}]})", 1.5, r);
    apply_stream_event(R"({"choices":[{"delta":{},"finish_reason":"stop"}]})", 1.6, r);
    apply_stream_event(R"({"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":11,"prompt_tokens_details":{"cached_tokens":3}}})",
                       1.7, r);
    EXPECT_FALSE(apply_stream_event("[DONE]", 1.8, r));
    EXPECT_EQ(r.first_text_s, 0.5);
    EXPECT_EQ(r.last_text_s, 1.5);
    EXPECT_EQ(r.text_events, 3);
    EXPECT_TRUE(r.usage);
    EXPECT_EQ(r.prompt_tokens, 7);
    EXPECT_EQ(r.cached_tokens, 3);
    EXPECT_EQ(r.decode_tokens(), 10);  // 11 completion tokens: the first one's time is in the TTFT
    EXPECT_DOUBLE_EQ(r.decode_seconds(), 1.0);
    // Without usage the text events are counted; one event: nothing timed.
    RequestTiming c;
    apply_stream_event(R"({"choices":[{"text":"x"}]})", 0.2, c);
    apply_stream_event(R"({"choices":[{"text":"y"}]})", 0.4, c);
    apply_stream_event(R"({"choices":[{"text":"z"}]})", 0.6, c);
    EXPECT_EQ(c.decode_tokens(), 2);
    EXPECT_NEAR(c.decode_seconds(), 0.4, 1e-12);
    RequestTiming one;
    apply_stream_event(R"({"choices":[{"text":"x"}]})", 0.2, one);
    EXPECT_EQ(one.decode_tokens(), 0);
    EXPECT_EQ(one.decode_seconds(), 0.0);
    RequestTiming e;
    apply_stream_event(R"({"error":{"message":"boom","type":"server_error"}})", 0.1, e);
    EXPECT_NE(e.error.find("boom"), std::string::npos);
}

TEST(BenchRequests, RatesAreWeightedTimedTokensOverTimedSeconds) {
    // Hand computation: request A has 11 completion tokens, first text at 0.5 s and last at 1.5 s
    // (10 timed tokens in 1 s); request B 5 tokens from 0.2 s to 2.2 s (4 in 2 s); C failed.
    // Weighted decode: 14 / 3 = 4.667 tok/s, not the mean of 10 and 2 (6). TTFT mean over the
    // two successful ones: 0.35 s. Prompt: (100 - 40 + 20) tokens / (0.5 + 0.2) s.
    std::vector<SavedRequest> q(3);
    q[1].turn = 1;
    std::vector<RequestTiming> t(3);
    t[0].usage = true, t[0].completion_tokens = 11, t[0].first_text_s = 0.5, t[0].last_text_s = 1.5;
    t[0].prompt_tokens = 100, t[0].cached_tokens = 40;
    t[1].usage = true, t[1].completion_tokens = 5, t[1].first_text_s = 0.2, t[1].last_text_s = 2.2, t[1].prompt_tokens = 20;
    t[2].error = "HTTP 500: boom";
    const ReplayTotals s = replay_totals(q, t);
    EXPECT_EQ(s.requests, 3);
    EXPECT_EQ(s.failed, 1);
    EXPECT_EQ(s.decode.tokens, 14);
    EXPECT_DOUBLE_EQ(s.decode.seconds, 3.0);
    EXPECT_NEAR(weighted_rate({s.decode}), 14.0 / 3.0, 1e-12);
    EXPECT_EQ(s.prompt.tokens, 80);
    EXPECT_NEAR(s.prompt.seconds, 0.7, 1e-12);
    EXPECT_EQ(s.completion_tokens, 16);
    EXPECT_EQ(s.cached_tokens, 40);
    ASSERT_EQ(s.ttft_s.size(), 2u);
    EXPECT_EQ(s.first_turns, 1);
    EXPECT_EQ(s.later_turns, 1);
    EXPECT_DOUBLE_EQ(s.ttft_first_turn_s, 0.5);
    EXPECT_DOUBLE_EQ(s.ttft_later_turns_s, 0.2);
}

// ---- the client against servers on the loopback ----

TEST(BenchRequests, TimesAStreamWithKnownDelays) {
    // A scripted SSE server: the role chunk at once, the first text after 300 ms, then four more
    // texts 100 ms apart, usage (5 completion tokens) and [DONE]. Expected: TTFT ~0.3 s, 4 timed
    // tokens in ~0.4 s (10 tok/s). The bounds allow for a loaded machine, not for a wrong clock.
    httplib::Server srv;
    std::string got_body;
    srv.Post("/v1/completions", [&](const httplib::Request& req, httplib::Response& res) {
        got_body = req.body;
        res.set_chunked_content_provider("text/event-stream", [](size_t, httplib::DataSink& sink) {
            auto send = [&](const std::string& d) {
                const std::string e = "data: " + d + "\n\n";
                sink.write(e.data(), e.size());
            };
            send(R"({"choices":[{"text":""}]})");
            std::this_thread::sleep_for(std::chrono::milliseconds(300));
            for (int i = 0; i < 5; ++i) {
                if (i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
                send(R"({"choices":[{"text":"t"}]})");
            }
            send(R"({"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":5}})");
            send("[DONE]");
            sink.done();
            return true;
        });
    });
    const int port = srv.bind_to_any_port("127.0.0.1");
    std::thread th([&] { srv.listen_after_bind(); });
    while (!srv.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    SavedRequest q;
    q.endpoint = "/v1/completions";
    q.body = {{"prompt", "x"}, {"max_tokens", 5}, {"model", "saved"}};
    HttpTarget t = parse_http_url("http://127.0.0.1:" + std::to_string(port), "--peer-url");
    const RequestTiming r = replay_request(t, q, 30);
    srv.stop();
    th.join();
    EXPECT_EQ(r.error, "");
    EXPECT_EQ(r.http_status, 200);
    EXPECT_GE(r.first_text_s, 0.29);
    EXPECT_LT(r.first_text_s, 0.29 + 1.0);
    EXPECT_EQ(r.text_events, 5);
    EXPECT_EQ(r.completion_tokens, 5);
    EXPECT_EQ(r.decode_tokens(), 4);
    EXPECT_GE(r.decode_seconds(), 0.39);
    EXPECT_LT(r.decode_seconds(), 0.39 + 1.0);
    const auto sent = nlohmann::json::parse(got_body);
    EXPECT_EQ(sent["stream"], true);
    EXPECT_FALSE(sent.contains("model"));
}

TEST(BenchRequests, APeerUrlThatIsDownIsAQuickClearError) {
    const std::string dir = test::temp_dir("req-down");
    const int port = free_port();
    const HttpTarget t = parse_http_url("http://127.0.0.1:" + std::to_string(port), "--peer-url");
    auto t0 = std::chrono::steady_clock::now();
    const std::string e = test::error_of([&] { check_server_up(t, "--peer-url", 5); });
    EXPECT_NE(e.find("--peer-url http://127.0.0.1:" + std::to_string(port) + ": cannot connect"), std::string::npos) << e;
    EXPECT_LT(secs(t0), 5.0);
    SavedRequest q;
    q.endpoint = "/v1/completions";
    q.body = {{"prompt", "x"}};
    t0 = std::chrono::steady_clock::now();
    const RequestTiming r = replay_request(t, q, 30);
    EXPECT_NE(r.error.find("cannot connect"), std::string::npos) << r.error;
    EXPECT_LT(secs(t0), 5.0);
    // The command fails before it starts anything, with the message.
    write_text(dir + "/r.jsonl", "{\"prompt\":\"a\",\"max_tokens\":2}\n");
    t0 = std::chrono::steady_clock::now();
    const int rc = run_status(std::string(NITRO_BINARY) + " bench -m " + kEmbedded + " -t 1 --read-probe 32 -o " + dir +
                                  "/out --modes cpu --requests " + dir + "/r.jsonl --peer-url http://127.0.0.1:" + std::to_string(port),
                              dir + "/log");
    EXPECT_NE(rc, 0);
    EXPECT_LT(secs(t0), 15.0);
    EXPECT_NE(read_text(dir + "/log").find("--peer-url http://127.0.0.1:" + std::to_string(port) + ": cannot connect"),
              std::string::npos)
        << read_text(dir + "/log");
}

TEST(BenchRequests, ReplayAgainstNitroServeHasTheRecordsAndHandComputedRates) {
    // The embedded model, served by nitro serve (started by the bench) and, as the peer, by a
    // second nitro serve started here: completions with ignore_eos generate exactly max_tokens.
    const std::string dir = test::temp_dir("req-serve");
    write_text(dir + "/r.jsonl",
               "{\"prompt\":\"def add(a, b):\",\"max_tokens\":6,\"temperature\":0,\"ignore_eos\":true}\n"
               "{\"conversation\":\"c\",\"body\":{\"prompt\":\"import os\\n\",\"max_tokens\":9,\"temperature\":0,\"ignore_eos\":true}}\n"
               "{\"conversation\":\"c\",\"body\":{\"prompt\":\"import os\\nimport sys\\n\",\"max_tokens\":4,\"temperature\":0,"
               "\"ignore_eos\":true}}\n");
    ServeProcess peer(NITRO_BINARY, {"-m", kEmbedded, "-t", "1", "-c", "256"}, dir + "/peer.log", 120);
    const int rc = run_status(std::string(NITRO_BINARY) + " bench -m " + kEmbedded + " -t 1 --read-probe 32 -o " + dir +
                                  "/out --modes cpu --ctx 256 --repeat 2 --requests " + dir +
                                  "/r.jsonl --peer-url http://127.0.0.1:" + std::to_string(peer.port()) + "/v1",
                              dir + "/log");
    ASSERT_EQ(rc, 0) << read_text(dir + "/log");
    const auto recs = read_records(dir + "/out");
    std::vector<std::string> order;
    int64_t tok[2] = {0, 0};
    double sec[2] = {0, 0};
    const nlohmann::json* step = nullptr;
    for (const auto& r : recs) {
        EXPECT_EQ(r["workload"], "requests");
        EXPECT_EQ(r["routing"], "model");  // the embedded model is a trained model, not a synth file
        EXPECT_EQ(r["requests_file"]["requests"], 3);
        EXPECT_EQ(r["requests_file"]["conversations"], 2);
        EXPECT_EQ(r["ctx"], 256);
        if (r["record"] == "step") step = &r;
        if (r["record"] != "run") continue;
        ASSERT_EQ(r["status"], "ok") << r.dump();
        const bool is_peer = r["engine"] == "peer";
        order.push_back(r["engine"]);
        if (!is_peer) {
            EXPECT_EQ(r["server"].value("started_by_bench", false), true) << r["server"];
        }
        const auto& q = r["requests"];
        ASSERT_EQ(q.size(), 3u);
        const int max_tokens[3] = {6, 9, 4};
        int64_t run_tok = 0;
        double run_sec = 0;
        for (int i = 0; i < 3; ++i) {
            EXPECT_EQ(q[i]["status"], "ok") << q[i];
            EXPECT_EQ(q[i]["kind"], "MEASURED");
            EXPECT_EQ(q[i]["tokens_from"], "usage");
            EXPECT_EQ(q[i]["completion_tokens"], max_tokens[i]);
            EXPECT_EQ(q[i]["decode_tokens"], max_tokens[i] - 1);
            EXPECT_GT(q[i]["prompt_tokens"].get<int>(), 0);
            EXPECT_GT(q[i]["ttft_ms"].get<double>(), 0);
            EXPECT_LE(q[i]["ttft_ms"].get<double>(), q[i]["total_ms"].get<double>());
            EXPECT_GT(q[i]["decode_seconds"].get<double>(), 0);
            run_tok += q[i]["decode_tokens"].get<int64_t>();
            run_sec += q[i]["decode_seconds"].get<double>();
        }
        EXPECT_EQ(q[2]["turn"], 1);
        EXPECT_EQ(q[2]["conversation"], "c");
        const auto& f = r["figures"];
        EXPECT_EQ(f["decode_tok_s"]["kind"], "CALCULATED");
        EXPECT_EQ(f["requests"]["value"], 3);
        EXPECT_EQ(f["decode_tokens"]["value"], 16);
        EXPECT_NEAR(f["decode_tok_s"]["value"].get<double>(), run_tok / run_sec, 1e-9 * run_tok / run_sec);
        if (!is_peer) {
            EXPECT_GT(f["server_peak_rss_bytes"]["value"].get<double>(), 0);
        }
        tok[is_peer] += run_tok;
        sec[is_peer] += run_sec;
    }
    EXPECT_EQ(order, (std::vector<std::string>{"nitro", "peer", "peer", "nitro"}));
    ASSERT_NE(step, nullptr);
    const auto& f = (*step)["figures"];
    const double nitro = tok[0] / sec[0], other = tok[1] / sec[1];
    EXPECT_NEAR(f["decode_tok_s"]["value"].get<double>(), nitro, 1e-9 * nitro);
    EXPECT_NEAR(f["peer_decode_tok_s"]["value"].get<double>(), other, 1e-9 * other);
    EXPECT_NEAR(f["ratio_decode_tok_s"]["value"].get<double>(), nitro / other, 1e-9 * nitro / other);
    EXPECT_EQ(f["ratio_ttft_ms"]["kind"], "CALCULATED");
    const std::string md = read_text(dir + "/out/report.md");
    EXPECT_NE(md.find("| cpu | model | - | requests (3) | 256 | 2 |"), std::string::npos) << md;
    EXPECT_NE(md.find("peer TTFT ms"), std::string::npos);
}

}  // namespace
}  // namespace nitro
