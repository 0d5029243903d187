#include "bench/bench_requests.h"

#include "core/error.h"
#include "core/user_file.h"

#include <fmt/format.h>
#include <httplib.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <map>
#include <sstream>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace nitro {

namespace {

using Clock = std::chrono::steady_clock;
double secs_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

const char* const kChat = "/v1/chat/completions";
const char* const kCompletions = "/v1/completions";

std::string tail_of_file(const std::string& path, size_t n) {
    std::ifstream f(path, std::ios::binary);
    std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    return s.size() > n ? s.substr(s.size() - n) : s;
}

/// "Connection refused" and the like for a client error.
std::string http_error_text(httplib::Error e) {
    switch (e) {
        case httplib::Error::Connection: return "cannot connect (nothing listening, or connection refused)";
        case httplib::Error::Read: return "the connection failed or timed out while reading the answer";
        case httplib::Error::Write: return "the connection failed while sending the request";
        case httplib::Error::ConnectionTimeout: return "the connection timed out";
        case httplib::Error::Canceled: return "cancelled";
        default: return httplib::to_string(e);
    }
}

void set_timeouts(httplib::Client& c, double connect_s, double read_s) {
    auto split = [](double s, time_t* sec, time_t* usec) {
        *sec = static_cast<time_t>(s);
        *usec = static_cast<time_t>((s - static_cast<double>(*sec)) * 1e6);
    };
    time_t s = 0, us = 0;
    split(connect_s, &s, &us);
    c.set_connection_timeout(s, us);
    split(read_s, &s, &us);
    c.set_read_timeout(s, us);
    c.set_write_timeout(s, us);
}

httplib::Headers headers_for(const HttpTarget& t) {
    httplib::Headers h;
    if (!t.api_key.empty()) h.emplace("Authorization", "Bearer " + t.api_key);
    return h;
}

/// The message of an OpenAI-style error body, or the body's start.
std::string error_message(const std::string& body) {
    const auto j = nlohmann::json::parse(body, nullptr, false);
    if (!j.is_discarded() && j.is_object() && j.contains("error")) {
        const auto& e = j["error"];
        if (e.is_object() && e.contains("message") && e["message"].is_string()) return e["message"].get<std::string>();
        if (e.is_string()) return e.get<std::string>();
    }
    return body.substr(0, 300);
}

}  // namespace

std::vector<SavedRequest> read_saved_requests(const std::string& path) {
    std::ifstream f = open_user_file(path, "--requests");
    std::vector<SavedRequest> out;
    std::map<std::string, int> turns;
    int line_no = 0;
    for (std::string line; std::getline(f, line);) {
        ++line_no;
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        const std::string where = fmt::format("{}:{}", path, line_no);
        nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
        if (j.is_discarded()) fail("{}: not valid JSON", where);
        if (!j.is_object()) fail("{}: a request line must be a JSON object (a request body, or {{\"body\": ...}})", where);
        SavedRequest q;
        q.line = line_no;
        q.id = fmt::format("line {}", line_no);
        q.conversation = q.id;
        std::string endpoint;
        if (j.contains("body")) {
            if (!j["body"].is_object()) fail("{}: \"body\" must be an object", where);
            for (const char* k : {"url", "endpoint"})
                if (j.contains(k)) {
                    if (!j[k].is_string()) fail("{}: \"{}\" must be a string", where, k);
                    endpoint = j[k].get<std::string>();
                }
            if (j.contains("custom_id")) q.id = j["custom_id"].is_string() ? j["custom_id"].get<std::string>() : j["custom_id"].dump();
            if (j.contains("conversation"))
                q.conversation = j["conversation"].is_string() ? j["conversation"].get<std::string>() : j["conversation"].dump();
            q.body = j["body"];
        } else {
            q.body = std::move(j);
        }
        const bool chat = q.body.contains("messages"), completion = q.body.contains("prompt");
        if (chat == completion)
            fail("{}: the request body needs exactly one of \"messages\" (chat/completions) and \"prompt\" (completions)", where);
        if (chat && !q.body["messages"].is_array()) fail("{}: \"messages\" must be an array", where);
        const std::string implied = chat ? kChat : kCompletions;
        if (!endpoint.empty()) {
            std::string e = endpoint;
            if (e.rfind("/v1", 0) != 0) e = "/v1" + (e.empty() || e[0] != '/' ? "/" + e : e);
            if (e != kChat && e != kCompletions)
                fail("{}: endpoint '{}' is not /v1/chat/completions or /v1/completions", where, endpoint);
            if (e != implied)
                fail("{}: endpoint '{}' does not match the body (a body with \"{}\" goes to {})", where, endpoint,
                     chat ? "messages" : "prompt", implied);
        }
        q.endpoint = implied;
        q.turn = turns[q.conversation]++;
        out.push_back(std::move(q));
    }
    if (f.bad()) fail("--requests {}: cannot read the file after line {}", path, line_no);
    if (out.empty()) fail("--requests {}: no requests in the file", path);
    return out;
}

HttpTarget parse_http_url(const std::string& url, const std::string& what) {
    HttpTarget t;
    t.url = url;
    const std::string scheme = "http://";
    if (url.rfind("https://", 0) == 0)
        fail("{} {}: https is not supported (this build's HTTP client has no TLS); use http://", what, url);
    if (url.rfind(scheme, 0) != 0) fail("{} '{}': expected http://HOST:PORT", what, url);
    std::string rest = url.substr(scheme.size());
    if (rest.find_first_of("?#") != std::string::npos) fail("{} '{}': a query or fragment is not allowed", what, url);
    const size_t slash = rest.find('/');
    std::string authority = rest.substr(0, slash);
    std::string path = slash == std::string::npos ? "" : rest.substr(slash);
    while (!path.empty() && path.back() == '/') path.pop_back();
    if (path.size() >= 3 && path.compare(path.size() - 3, 3, "/v1") == 0) path.resize(path.size() - 3);
    t.prefix = path;
    std::string port;
    if (!authority.empty() && authority[0] == '[') {  // [IPv6]:port
        const size_t e = authority.find(']');
        if (e == std::string::npos) fail("{} '{}': unclosed '[' in the host", what, url);
        t.host = authority.substr(1, e - 1);
        if (e + 1 < authority.size()) {
            if (authority[e + 1] != ':') fail("{} '{}': expected ':' after the IPv6 address", what, url);
            port = authority.substr(e + 2);
        }
    } else {
        const size_t c = authority.rfind(':');
        t.host = authority.substr(0, c);
        if (c != std::string::npos) port = authority.substr(c + 1);
    }
    if (t.host.empty()) fail("{} '{}': no host", what, url);
    if (!port.empty()) {
        if (port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos)
            fail("{} '{}': port '{}' is not a number", what, url, port);
        t.port = std::stoi(port);
        if (t.port < 1 || t.port > 65535) fail("{} '{}': port {} is out of range 1..65535", what, url, t.port);
    }
    return t;
}

void check_server_up(const HttpTarget& t, const std::string& what, double timeout_s) {
    httplib::Client c(t.host, t.port);
    set_timeouts(c, timeout_s, timeout_s);
    auto r = c.Get((t.prefix + "/v1/models").c_str(), headers_for(t));
    if (!r) fail("{} {}: {} (checked with GET {}/v1/models)", what, t.url, http_error_text(r.error()), t.prefix);
    if (r->status != 200)
        fail("{} {}: GET {}/v1/models answered HTTP {}: {}", what, t.url, t.prefix, r->status, error_message(r->body));
}

void SseParser::feed(const char* p, size_t n, double t) {
    buf_.append(p, n);
    size_t start = 0;
    for (;;) {
        const size_t nl = buf_.find('\n', start);
        if (nl == std::string::npos) break;
        std::string line = buf_.substr(start, nl - start);
        start = nl + 1;
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.empty()) {  // end of an event
            if (have_data_) on_event_(data_, t);
            data_.clear();
            have_data_ = false;
            continue;
        }
        if (line[0] == ':') continue;  // a comment
        const size_t colon = line.find(':');
        const std::string field = line.substr(0, colon);
        std::string value = colon == std::string::npos ? "" : line.substr(colon + 1);
        if (!value.empty() && value[0] == ' ') value.erase(0, 1);
        if (field == "data") {
            if (have_data_) data_ += '\n';
            data_ += value;
            have_data_ = true;
        }
    }
    buf_.erase(0, start);
}

void SseParser::finish(double t) {
    if (!buf_.empty()) feed("\n", 1, t);
    if (have_data_) on_event_(data_, t);
    data_.clear();
    have_data_ = false;
}

int64_t RequestTiming::decode_tokens() const {
    const int64_t n = usage ? completion_tokens : text_events;
    return first_text_s >= 0 && last_text_s > first_text_s && n > 1 ? n - 1 : 0;
}

double RequestTiming::decode_seconds() const { return decode_tokens() > 0 ? last_text_s - first_text_s : 0.0; }

bool apply_stream_event(const std::string& data, double t, RequestTiming& r) {
    if (data == "[DONE]") return false;
    const auto j = nlohmann::json::parse(data, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
        if (r.error.empty()) r.error = "the stream carried an event that is not a JSON object: " + data.substr(0, 200);
        return true;
    }
    if (j.contains("error") && !j["error"].is_null()) {
        if (r.error.empty()) r.error = "error event: " + error_message(data);
        return true;
    }
    bool text = false;
    if (j.contains("choices") && j["choices"].is_array())
        for (const auto& c : j["choices"]) {
            if (!c.is_object()) continue;
            if (c.contains("text") && c["text"].is_string() && !c["text"].get<std::string>().empty()) text = true;
            if (c.contains("delta") && c["delta"].is_object()) {
                const auto& d = c["delta"];
                for (const char* k : {"content", "reasoning_content", "reasoning"})
                    if (d.contains(k) && d[k].is_string() && !d[k].get<std::string>().empty()) text = true;
                if (d.contains("tool_calls") && d["tool_calls"].is_array() && !d["tool_calls"].empty()) text = true;
            }
        }
    if (text) {
        if (r.first_text_s < 0) r.first_text_s = t;
        r.last_text_s = t;
        ++r.text_events;
    }
    if (j.contains("usage") && j["usage"].is_object()) {
        const auto& u = j["usage"];
        auto num = [](const nlohmann::json& o, const char* k) -> int64_t {
            return o.contains(k) && o[k].is_number_integer() ? o[k].get<int64_t>() : 0;
        };
        r.usage = true;
        r.prompt_tokens = num(u, "prompt_tokens");
        r.completion_tokens = num(u, "completion_tokens");
        if (u.contains("prompt_tokens_details") && u["prompt_tokens_details"].is_object())
            r.cached_tokens = num(u["prompt_tokens_details"], "cached_tokens");
    }
    return true;
}

nlohmann::json replay_body(const SavedRequest& q, const HttpTarget& t) {
    nlohmann::json b = q.body;
    b["stream"] = true;
    b["stream_options"] = {{"include_usage", true}};
    if (t.model.empty()) b.erase("model");
    else b["model"] = t.model;
    return b;
}

RequestTiming replay_request(const HttpTarget& t, const SavedRequest& q, double timeout_s) {
    RequestTiming r;
    httplib::Client c(t.host, t.port);
    set_timeouts(c, std::min(timeout_s, 10.0), timeout_s);
    httplib::Request req;
    req.method = "POST";
    req.path = t.prefix + q.endpoint;
    req.headers = headers_for(t);
    req.headers.emplace("Content-Type", "application/json");
    req.headers.emplace("Accept", "text/event-stream");
    req.body = replay_body(q, t).dump();
    std::string error_body;
    bool ok_status = false;
    const auto t0 = Clock::now();
    SseParser sse([&](const std::string& data, double at) { apply_stream_event(data, at, r); });
    req.response_handler = [&](const httplib::Response& res) {
        r.http_status = res.status;
        ok_status = res.status == 200;
        return true;
    };
    req.content_receiver = [&](const char* p, size_t n, uint64_t, uint64_t) {
        const double at = secs_since(t0);
        if (ok_status) sse.feed(p, n, at);
        else if (error_body.size() < 65536) error_body.append(p, n);
        return true;
    };
    httplib::Response res;
    httplib::Error err = httplib::Error::Success;
    const bool sent = c.send(req, res, err);
    r.total_s = secs_since(t0);
    if (ok_status) sse.finish(r.total_s);
    if (r.http_status == 0) r.http_status = res.status > 0 ? res.status : 0;
    if (!sent && r.error.empty()) r.error = fmt::format("{} {}{}: {}", t.url, t.prefix, q.endpoint, http_error_text(err));
    else if (r.http_status != 200 && r.error.empty())
        r.error = fmt::format("HTTP {}: {}", r.http_status, error_message(error_body.empty() ? res.body : error_body));
    else if (r.error.empty() && r.first_text_s < 0)
        r.error = "the stream ended without generated text";
    return r;
}

ReplayTotals replay_totals(const std::vector<SavedRequest>& reqs, const std::vector<RequestTiming>& timings) {
    ReplayTotals s;
    double first = 0, later = 0;
    for (size_t i = 0; i < timings.size(); ++i) {
        const RequestTiming& r = timings[i];
        ++s.requests;
        if (!r.error.empty()) {
            ++s.failed;
            continue;
        }
        s.prompt_tokens += r.prompt_tokens;
        s.cached_tokens += r.cached_tokens;
        s.completion_tokens += r.usage ? r.completion_tokens : r.text_events;
        s.decode.tokens += r.decode_tokens();
        s.decode.seconds += r.decode_seconds();
        s.prompt.tokens += std::max<int64_t>(0, r.prompt_tokens - r.cached_tokens);
        s.prompt.seconds += r.first_text_s;
        s.ttft_s.push_back(r.first_text_s);
        if (i < reqs.size() && reqs[i].turn > 0) {
            later += r.first_text_s;
            ++s.later_turns;
        } else {
            first += r.first_text_s;
            ++s.first_turns;
        }
    }
    if (s.first_turns) s.ttft_first_turn_s = first / s.first_turns;
    if (s.later_turns) s.ttft_later_turns_s = later / s.later_turns;
    return s;
}

ServeProcess::ServeProcess(const std::string& nitro_binary, const std::vector<std::string>& args, const std::string& log_path,
                           double timeout_s) {
    std::vector<std::string> argv = {nitro_binary, "serve", "--host", "127.0.0.1", "--port", "0"};
    argv.insert(argv.end(), args.begin(), args.end());
    const int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) fail("cannot create the server log {}: {}", log_path, std::strerror(errno));
    std::vector<char*> cargv;
    for (auto& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    // The bench's own settings for a server must not leak into it: its flags say everything.
    // (The environment is copied here: between fork and exec only async-signal-safe calls.)
    std::vector<char*> envp;
    for (char** e = environ; *e; ++e) {
        bool drop = false;
        for (const char* v : {"NITRO_API_KEY=", "NITRO_HOST=", "NITRO_PORT=", "NITRO_PARALLEL=", "NITRO_MODE=",
                              "NITRO_VRAM_BUDGET=", "NITRO_CTX_SIZE=", "NITRO_MODEL=", "NITRO_ALLOWED_HOSTS="})
            drop |= std::strncmp(*e, v, std::strlen(v)) == 0;
        if (!drop) envp.push_back(*e);
    }
    envp.push_back(nullptr);
    pid_ = fork();
    if (pid_ < 0) {
        close(fd);
        fail("cannot fork for nitro serve: {}", std::strerror(errno));
    }
    if (pid_ == 0) {
        setpgid(0, 0);
        dup2(fd, 1);
        dup2(fd, 2);
        const int null = open("/dev/null", O_RDONLY);
        if (null >= 0) dup2(null, 0);
        execve(cargv[0], cargv.data(), envp.data());
        const char msg[] = "cannot run the nitro binary for nitro serve\n";
        (void)!write(2, msg, sizeof msg - 1);
        _exit(127);
    }
    setpgid(pid_, pid_);
    close(fd);
    const auto t0 = Clock::now();
    const std::string key = "listening on http://127.0.0.1:";
    for (;;) {
        int status = 0;
        if (waitpid(pid_, &status, WNOHANG) == pid_) {
            pid_ = -1;
            fail("nitro serve exited before listening ({}); the end of its log {}:\n{}",
                 WIFEXITED(status) ? fmt::format("status {}", WEXITSTATUS(status)) : "killed by a signal", log_path,
                 tail_of_file(log_path, 1500));
        }
        const std::string log = tail_of_file(log_path, 1 << 20);
        if (const size_t at = log.find(key); at != std::string::npos) {
            port_ = std::atoi(log.c_str() + at + key.size());
            if (port_ > 0) break;
        }
        if (secs_since(t0) > timeout_s) {
            kill(-pid_, SIGKILL);
            waitpid(pid_, &status, 0);
            pid_ = -1;
            fail("nitro serve was not listening after {:g} s; the end of its log {}:\n{}", timeout_s, log_path,
                 tail_of_file(log_path, 1500));
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
}

ServeProcess::~ServeProcess() {
    if (pid_ <= 0) return;
    kill(-pid_, SIGTERM);
    const auto t0 = Clock::now();
    int status = 0;
    while (waitpid(pid_, &status, WNOHANG) == 0) {
        if (secs_since(t0) > 10) {
            kill(-pid_, SIGKILL);
            waitpid(pid_, &status, 0);
            break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
}

}  // namespace nitro
