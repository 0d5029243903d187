// What the connection front checks in a request's bytes (issue 50), against RFC 9112 and
// cpp-httplib 0.11's own reading: where a head ends, which heads are refused and with what
// message (the red-team's unparsable request line, two Host headers, HTTP/1.1 without Host), and
// a chunked body's trailer fields dropped with every chunk boundary kept.
#include "server/http_parse.h"

#include <gtest/gtest.h>

namespace nitro::server {
namespace {

TEST(ServerHttpHead, EndsAtTheFirstEmptyLine) {
    EXPECT_EQ(find_head_end("GET / HTTP/1.1\r\nHost: a\r\n\r\nBODY"), std::optional<size_t>(27));
    EXPECT_EQ(find_head_end("GET / HTTP/1.1\r\n\r\n"), std::optional<size_t>(18));
    EXPECT_FALSE(find_head_end("GET / HTTP/1.1\r\nHost: a\r\n"));
    EXPECT_FALSE(find_head_end("GET / HTTP/1.1\r\nHost: a\r\n\r"));
    // A bare-LF line before "\r\n" ends the head where cpp-httplib's line reader ends it (the
    // check below then refuses the bare LF).
    EXPECT_EQ(find_head_end("GET / HTTP/1.1\nA: b\n\r\nX"), std::optional<size_t>(22));
    EXPECT_EQ(leading_empty_lines("\r\n\r\nGET"), 4u);
    EXPECT_EQ(leading_empty_lines("\nGET"), 1u);
    EXPECT_EQ(leading_empty_lines("GET"), 0u);
}

RequestHead check(const std::string& head) { return check_request_head(head); }

TEST(ServerHttpHead, AcceptsWellFormedHeads) {
    const RequestHead h = check("POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nContent-Type: application/json\r\n"
                                "Transfer-Encoding: chunked\r\n\r\n");
    EXPECT_EQ(h.status, 0) << h.error;
    EXPECT_EQ(h.method, "POST");
    EXPECT_EQ(h.target, "/v1/completions");
    EXPECT_TRUE(h.chunked);
    EXPECT_EQ(check("GET /health HTTP/1.0\r\n\r\n").status, 0) << "HTTP/1.0 may leave Host out";
    EXPECT_EQ(check("GET /health HTTP/1.1\r\nhOsT: x\r\nX-Empty:\r\n\r\n").status, 0);
}

TEST(ServerHttpHead, RefusesMalformedHeadsNamingWhatIsWrong) {
    struct Case {
        std::string head;
        int status;
        std::string code, says;
    };
    const std::vector<Case> cases = {
        // The red-team's unparsable request line was answered "HTTP 400 for  ".
        {"GARBAGE\r\nHost: a\r\n\r\n", 400, "invalid_request_line", "'GARBAGE' is not three parts"},
        {"GET  / HTTP/1.1\r\nHost: a\r\n\r\n", 400, "invalid_request_line", "three parts"},
        {"GET / HTTP/1.1 x\r\nHost: a\r\n\r\n", 400, "invalid_request_line", "three parts"},
        {"GET /a\x01 HTTP/1.1\r\nHost: a\r\n\r\n", 400, "invalid_request_line", "control characters"},
        {"G(T / HTTP/1.1\r\nHost: a\r\n\r\n", 400, "invalid_request_line", "method 'G(T'"},
        {"GET / HTTP/2.0\r\nHost: a\r\n\r\n", 505, "http_version_not_supported", "'HTTP/2.0'"},
        {"GET / HTTPS/1.1\r\nHost: a\r\n\r\n", 400, "invalid_request_line", "not an HTTP version"},
        {"BREW /pot HTTP/1.1\r\nHost: a\r\n\r\n", 501, "method_not_supported", "'BREW'"},
        {"GET / HTTP/1.1\nHost: a\r\n\r\n", 400, "invalid_header", "Line 1"},
        {"GET / HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n", 400, "invalid_header", "line folding"},
        {"GET / HTTP/1.1\r\nHost: a\r\nNo colon here\r\n\r\n", 400, "invalid_header", "'No colon here'"},
        {"GET / HTTP/1.1\r\nHost : a\r\n\r\n", 400, "invalid_header", "Header line 2"},
        // RFC 9112 section 3.2: one Host, present in HTTP/1.1.
        {"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400, "invalid_host", "2 Host headers"},
        {"GET / HTTP/1.1\r\nAccept: */*\r\n\r\n", 400, "invalid_host", "must have a Host"},
        {"GET / HTTP/1.0\r\nHost: a\r\nhost: b\r\n\r\n", 400, "invalid_host", "2 Host headers"},
        {"GET /" + std::string(kMaxRequestLine, 'a') + " HTTP/1.1\r\nHost: a\r\n\r\n", 414, "request_line_too_long", "8192"},
    };
    for (const Case& c : cases) {
        const RequestHead h = check(c.head);
        EXPECT_EQ(h.status, c.status) << c.head.substr(0, 60);
        EXPECT_EQ(h.code, c.code) << c.head.substr(0, 60);
        EXPECT_NE(h.error.find(c.says), std::string::npos) << h.error;
    }
}

std::string filter_all(const std::string& in, size_t piece, ChunkedTrailerFilter& f, bool* ok = nullptr) {
    std::string out;
    bool good = true;
    for (size_t i = 0; i < in.size(); i += piece) good = f.feed(std::string_view(in).substr(i, piece), out) && good;
    if (ok) *ok = good;
    return out;
}

TEST(ServerHttpChunked, TrailerFieldsAreDroppedChunksKept) {
    const std::string body = "5\r\nhello\r\n1;ext=1\r\n!\r\n0\r\nX-Checksum: abc\r\nX-Other: 1\r\n\r\n";
    const std::string want = "5\r\nhello\r\n1;ext=1\r\n!\r\n0\r\n\r\n";
    for (size_t piece : {size_t{1}, size_t{3}, size_t{7}, body.size()}) {
        ChunkedTrailerFilter f;
        EXPECT_EQ(filter_all(body + "GET / HTTP/1.1\r\n", piece, f), want + "GET / HTTP/1.1\r\n") << piece;
        EXPECT_TRUE(f.done());
        EXPECT_EQ(f.trailer_fields(), 2u);
    }
    // Without trailers the bytes are unchanged; a chunk's data may hold anything.
    const std::string plain = "4\r\n" "0\r\n\r" "\r\n" "0\r\n" "\r\n";  // the data "0\r\n\r" looks like an end
    ChunkedTrailerFilter f;
    EXPECT_EQ(filter_all(plain, 1, f), plain);
    EXPECT_TRUE(f.done());
    EXPECT_EQ(f.trailer_fields(), 0u);
}

TEST(ServerHttpChunked, MalformedFramingPassesForTheParserToRefuseAndTrailersAreBounded) {
    for (const std::string bad : {"zz\r\nhello\r\n", "5\r\nhelloXX\r\n0\r\n\r\n", "0\r\nnot a field\r\n\r\n"}) {
        ChunkedTrailerFilter f;
        EXPECT_EQ(filter_all(bad, 1, f), bad) << bad;
    }
    ChunkedTrailerFilter f;
    bool ok = true;
    std::string huge = "0\r\n";
    for (int i = 0; i < 1000; ++i) huge += "X-T" + std::to_string(i) + ": 0123456789\r\n";
    filter_all(huge + "\r\n", 64, f, &ok);
    EXPECT_FALSE(ok) << "more than " << ChunkedTrailerFilter::kMaxTrailerBytes << " bytes of trailers";
}

}  // namespace
}  // namespace nitro::server
