// One line per HTTP request on stderr, for `nitro serve`: what was asked, how it was answered
// and, for a generation, what it cost (docs/server.md "Request log").
//   POST /v1/chat/completions 200 | prompt 812 tokens (768 cached) | completion 64 tokens | TTFT 35.2 ms | 41.7 tok/s | 1.61 s
//   GET /health 200
#pragma once

#include "server/scheduler.h"

#include <string>

namespace nitro::server {

/// The log line of a request (no newline). `stats` is the finished job's, or null for a request
/// that ran none (a GET, an error before the job). TTFT = time queued + prompt; tok/s = decode
/// steps after the first token over the decode time.
std::string request_log_line(const std::string& method, const std::string& path, int status, const JobStats* stats);

}  // namespace nitro::server
