#include "server/http_parse.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <cstdlib>
#include <vector>

namespace nitro::server {

std::optional<size_t> find_head_end(std::string_view buf) {
    // cpp-httplib reads lines up to '\n' and stops at the line "\r\n".
    const size_t at = buf.find("\n\r\n");
    if (at == std::string_view::npos) return std::nullopt;
    return at + 3;
}

size_t leading_empty_lines(std::string_view buf) {
    size_t i = 0;
    for (;;) {
        if (buf.substr(i, 2) == "\r\n") i += 2;
        else if (buf.substr(i, 1) == "\n") i += 1;
        else return i;
    }
}

namespace {

/// RFC 9110 tchar.
bool is_tchar(unsigned char c) {
    return std::isalnum(c) || std::string_view("!#$%&'*+-.^_`|~").find(static_cast<char>(c)) != std::string_view::npos;
}

std::string lower(std::string_view s) {
    std::string out(s);
    std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return out;
}

/// Printable form of request bytes for an error message: at most 80 characters, control bytes escaped.
std::string shown(std::string_view s) {
    std::string out;
    for (unsigned char c : s.substr(0, 80)) {
        if (c == '\r') out += "\\r";
        else if (c == '\n') out += "\\n";
        else if (c < 0x20 || c == 0x7f) out += fmt::format("\\x{:02x}", c);
        else out += static_cast<char>(c);
    }
    if (s.size() > 80) out += "...";
    return out;
}

RequestHead refuse(int status, std::string error, std::string code) {
    RequestHead h;
    h.status = status;
    h.error = std::move(error);
    h.code = std::move(code);
    return h;
}

/// The methods cpp-httplib 0.11 parses (others it answers with a bare 400).
bool known_method(std::string_view m) {
    for (std::string_view k : {"GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH", "PRI"})
        if (m == k) return true;
    return false;
}

RequestHead check_request_line(std::string_view line) {
    const std::string format = " (a request line is 'METHOD /path HTTP/1.1')";
    if (line.size() > kMaxRequestLine)
        return refuse(414, fmt::format("The request line is {} bytes long, more than the {} this server reads.", line.size(), kMaxRequestLine),
                      "request_line_too_long");
    std::vector<std::string_view> parts;
    for (size_t i = 0; i <= line.size();) {
        const size_t sp = std::min(line.find(' ', i), line.size());
        parts.push_back(line.substr(i, sp - i));
        i = sp + 1;
    }
    if (parts.size() != 3 || parts[0].empty() || parts[1].empty() || parts[2].empty())
        return refuse(400, fmt::format("The request line '{}' is not three parts separated by single spaces{}.", shown(line), format),
                      "invalid_request_line");
    RequestHead h;
    h.method = parts[0];
    h.target = parts[1];
    h.version = parts[2];
    if (!std::all_of(h.method.begin(), h.method.end(), [](char c) { return is_tchar(static_cast<unsigned char>(c)); }))
        return refuse(400, fmt::format("The request method '{}' is not a method name{}.", shown(h.method), format), "invalid_request_line");
    if (std::any_of(h.target.begin(), h.target.end(), [](unsigned char c) { return c < 0x21 || c == 0x7f; }))
        return refuse(400, fmt::format("The request target '{}' holds control characters.", shown(h.target)), "invalid_request_line");
    if (h.version != "HTTP/1.1" && h.version != "HTTP/1.0") {
        const bool http = h.version.size() == 8 && h.version.starts_with("HTTP/") && std::isdigit(static_cast<unsigned char>(h.version[5])) &&
                          h.version[6] == '.' && std::isdigit(static_cast<unsigned char>(h.version[7]));
        if (http) return refuse(505, fmt::format("HTTP version '{}' is not supported (HTTP/1.1 and HTTP/1.0 are).", h.version), "http_version_not_supported");
        return refuse(400, fmt::format("The request line ends in '{}', which is not an HTTP version{}.", shown(h.version), format), "invalid_request_line");
    }
    if (!known_method(h.method))
        return refuse(501, fmt::format("The method '{}' is not supported by this server.", shown(h.method)), "method_not_supported");
    return h;
}

}  // namespace

RequestHead check_request_head(std::string_view head) {
    // Lines, each ending in CRLF (a bare LF is refused: cpp-httplib would skip that line, so the
    // head would not mean what it says).
    std::vector<std::string_view> lines;
    for (size_t i = 0; i < head.size();) {
        const size_t nl = head.find('\n', i);
        if (nl == std::string_view::npos) break;
        if (nl == i || head[nl - 1] != '\r')
            return refuse(400, fmt::format("Line {} of the request head ends in a bare LF; HTTP lines end in CRLF.", lines.size() + 1),
                          "invalid_header");
        lines.push_back(head.substr(i, nl - 1 - i));
        i = nl + 1;
    }
    if (lines.empty()) return refuse(400, "The request head is empty.", "invalid_request_line");
    RequestHead h = check_request_line(lines[0]);
    if (h.status) return h;
    int n_host = 0;
    for (size_t i = 1; i < lines.size(); ++i) {
        const std::string_view l = lines[i];
        if (l.empty()) break;  // the end of the head
        if (l.front() == ' ' || l.front() == '\t')
            return refuse(400, fmt::format("Header line {} starts with whitespace (obsolete line folding, RFC 9112 section 5.2).", i + 1),
                          "invalid_header");
        const size_t colon = l.find(':');
        const std::string_view name = l.substr(0, colon == std::string_view::npos ? l.size() : colon);
        if (colon == std::string_view::npos || name.empty() ||
            !std::all_of(name.begin(), name.end(), [](char c) { return is_tchar(static_cast<unsigned char>(c)); }))
            return refuse(400, fmt::format("Header line {} ('{}') is not 'Name: value'.", i + 1, shown(l)), "invalid_header");
        const std::string key = lower(name);
        if (key == "host") ++n_host;
        if (key == "transfer-encoding" && lower(l.substr(colon + 1)).find("chunked") != std::string::npos) h.chunked = true;
    }
    if (n_host > 1)
        return refuse(400, fmt::format("The request has {} Host headers; HTTP allows one (RFC 9112 section 3.2).", n_host), "invalid_host");
    if (n_host == 0 && h.version == "HTTP/1.1")
        return refuse(400, "An HTTP/1.1 request must have a Host header (RFC 9112 section 3.2).", "invalid_host");
    return h;
}

bool ChunkedTrailerFilter::feed(std::string_view in, std::string& out) {
    size_t i = 0;
    while (i < in.size()) {
        switch (state_) {
            case State::DONE:
                out.append(in.substr(i));
                return true;
            case State::DATA: {
                const size_t n = static_cast<size_t>(std::min<uint64_t>(remaining_, in.size() - i));
                out.append(in.substr(i, n));
                i += n;
                remaining_ -= n;
                if (remaining_ == 0) state_ = State::DATA_END_LINE;
                break;
            }
            case State::SIZE_LINE:
            case State::DATA_END_LINE:
            case State::TRAILER_LINE: {
                const size_t nl = in.find('\n', i);
                const size_t end = nl == std::string_view::npos ? in.size() : nl + 1;
                line_.append(in.substr(i, end - i));
                if (state_ != State::TRAILER_LINE) out.append(in.substr(i, end - i));
                i = end;
                if (nl == std::string_view::npos) {
                    if (state_ == State::TRAILER_LINE && line_.size() > kMaxTrailerBytes) return false;
                    break;
                }
                const std::string line = std::move(line_);
                line_.clear();
                if (state_ == State::SIZE_LINE) {
                    // The chunk size as cpp-httplib reads it (strtoul, base 16).
                    char* stop = nullptr;
                    const unsigned long n = std::strtoul(line.c_str(), &stop, 16);
                    if (stop == line.c_str() || n == ULONG_MAX) state_ = State::DONE;  // the parser refuses it
                    else if (n == 0) state_ = State::TRAILER_LINE;
                    else remaining_ = n, state_ = State::DATA;
                } else if (state_ == State::DATA_END_LINE) {
                    state_ = line == "\r\n" ? State::SIZE_LINE : State::DONE;  // (the parser ends the body there)
                } else if (line == "\r\n") {
                    out += line;
                    state_ = State::DONE;
                } else {
                    const size_t colon = line.find(':');
                    const bool field = line.ends_with("\r\n") && colon != std::string::npos && colon > 0 &&
                                       std::all_of(line.begin(), line.begin() + static_cast<long>(colon),
                                                   [](char c) { return is_tchar(static_cast<unsigned char>(c)); });
                    if (!field) {  // not a trailer field: the parser sees it and refuses the body
                        out += line;
                        state_ = State::DONE;
                        break;
                    }
                    ++n_trailers_;
                    trailer_bytes_ += line.size();
                    if (trailer_bytes_ > kMaxTrailerBytes) return false;
                }
                break;
            }
        }
    }
    return true;
}

}  // namespace nitro::server
