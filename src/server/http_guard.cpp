#include "server/http_guard.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <filesystem>

namespace nitro::server {

namespace {

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
}

std::string lower(std::string_view s) {
    std::string out(s);
    std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return out;
}

bool is_ip_literal(const std::string& h) {
    in_addr a4{};
    in6_addr a6{};
    return inet_pton(AF_INET, h.c_str(), &a4) == 1 || inet_pton(AF_INET6, h.c_str(), &a6) == 1;
}

}  // namespace

bool is_loopback_host(std::string_view host) {
    std::string h = lower(host);
    if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
    if (h == "localhost" || h.ends_with(".localhost")) return true;
    in_addr a4{};
    if (inet_pton(AF_INET, h.c_str(), &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
    in6_addr a6{};
    return inet_pton(AF_INET6, h.c_str(), &a6) == 1 && IN6_IS_ADDR_LOOPBACK(&a6);
}

namespace {

int port_of(const sockaddr_storage& ss) {
    if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(ss).sin_port);
    if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(ss).sin6_port);
    return -1;
}

std::string addr_of(const sockaddr_storage& ss) {
    char buf[INET6_ADDRSTRLEN] = {};
    if (ss.ss_family == AF_INET) inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(ss).sin_addr, buf, sizeof buf);
    else if (ss.ss_family == AF_INET6) inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(ss).sin6_addr, buf, sizeof buf);
    return buf;
}

}  // namespace

BodyFraming body_framing(const std::vector<std::string>& content_lengths, const std::vector<std::string>& transfer_encodings) {
    BodyFraming f;
    for (const auto& te : transfer_encodings) {
        if (lower(trim(te)) != "chunked") {
            f.error = "Transfer-Encoding '" + te + "' is not supported (only chunked)";
            return f;
        }
        f.chunked = true;
    }
    if (transfer_encodings.size() > 1) {
        f.error = "more than one Transfer-Encoding header";
        return f;
    }
    for (const auto& cl : content_lengths) {
        const std::string_view v = trim(cl);
        uint64_t n = 0;
        bool ok = !v.empty() && v.size() <= 19;
        for (char c : v) {
            if (c < '0' || c > '9') ok = false;
            else n = n * 10 + static_cast<uint64_t>(c - '0');
        }
        if (!ok) {
            f.error = "Content-Length '" + cl + "' is not a number of bytes";
            return f;
        }
        if (f.content_length && *f.content_length != n) {
            f.error = "Content-Length headers disagree";
            return f;
        }
        f.content_length = n;
    }
    if (f.chunked && f.content_length) f.error = "both Content-Length and Transfer-Encoding are given";
    return f;
}

bool constant_time_equal(std::string_view a, std::string_view b) {
    // Compare over the longer length so the time does not depend on where they differ.
    const size_t n = std::max(a.size(), b.size());
    unsigned diff = a.size() == b.size() ? 0u : 1u;
    for (size_t i = 0; i < n; ++i) {
        const auto x = static_cast<unsigned char>(i < a.size() ? a[i] : 0);
        const auto y = static_cast<unsigned char>(i < b.size() ? b[i] : 0);
        diff |= static_cast<unsigned>(x ^ y);
    }
    return diff == 0;
}

bool api_key_matches(std::string_view authorization, std::string_view x_api_key, std::string_view key) {
    bool ok = false;
    const std::string_view auth = trim(authorization);
    const size_t sp = auth.find_first_of(" \t");
    if (sp != std::string_view::npos && lower(auth.substr(0, sp)) == "bearer")
        ok = constant_time_equal(trim(auth.substr(sp)), key);
    // Both are compared whatever the first gave, so the time says nothing about which matched.
    const bool by_header = !x_api_key.empty() && constant_time_equal(trim(x_api_key), key);
    return ok || by_header;
}

std::string host_of_header(std::string_view h) {
    h = trim(h);
    std::string_view host;
    if (!h.empty() && h.front() == '[') {
        const size_t close = h.find(']');
        if (close == std::string_view::npos || (close + 1 < h.size() && h[close + 1] != ':')) return "";  // malformed
        host = h.substr(1, close - 1);
    } else {
        const size_t colon = h.rfind(':');
        host = colon == std::string_view::npos ? h : h.substr(0, colon);
    }
    std::string out = lower(host);
    if (!out.empty() && out.back() == '.') out.pop_back();
    return out;
}

bool host_allowed(std::string_view host_header, std::string_view bound_host, const std::vector<std::string>& allowed) {
    if (trim(host_header).empty()) return true;
    const std::string h = host_of_header(host_header);
    if (h.empty()) return false;
    if (is_ip_literal(h)) return true;  // an address cannot be rebound to another one
    if (h == "localhost" || h.ends_with(".localhost")) return true;  // browsers resolve these to loopback themselves
    if (h == host_of_header(bound_host)) return true;
    for (const auto& a : allowed)
        if (a == "*" || host_of_header(a) == h) return true;
    return false;
}

PeerState peer_state(int fd) {
    if (fd < 0) return PeerState::OPEN;
    pollfd p{fd, static_cast<short>(POLLIN | POLLRDHUP), 0};
    if (poll(&p, 1, 0) <= 0) return PeerState::OPEN;
    if (p.revents & (POLLHUP | POLLERR | POLLNVAL)) return PeerState::GONE;
    if (p.revents & POLLRDHUP) return PeerState::HALF_CLOSED;
    if (p.revents & POLLIN) {
        char c;
        const ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
        if (n == 0) return PeerState::HALF_CLOSED;
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return PeerState::GONE;
    }
    return PeerState::OPEN;
}

bool write_probe(int fd, std::string_view bytes) {
    if (fd < 0) return false;
    const ssize_t n = send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    return n == static_cast<ssize_t>(bytes.size());
}

int find_connection_socket(const std::string& remote_addr, int remote_port, int local_port) {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
        int fd = -1;
        try {
            fd = std::stoi(e.path().filename().string());
        } catch (...) {
            continue;
        }
        sockaddr_storage peer{}, local{};
        socklen_t lp = sizeof peer, ll = sizeof local;
        if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &lp) != 0) continue;
        if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &ll) != 0) continue;
        if (port_of(peer) == remote_port && port_of(local) == local_port && addr_of(peer) == remote_addr) return fd;
    }
    return -1;
}

std::string url_authority(const std::string& host, int port) {
    const bool v6 = host.find(':') != std::string::npos && !host.starts_with('[');
    return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

}  // namespace nitro::server
