#include "hub/http_client.h"

#include "core/version.h"

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <memory>
#include <mutex>

namespace nitro::hub {

namespace {

void global_init() {
    static std::once_flag once;
    std::call_once(once, [] {
        if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) fail("libcurl could not initialise (curl_global_init)");
    });
}

struct Easy {
    CURL* h = nullptr;
    curl_slist* headers = nullptr;
    char errbuf[CURL_ERROR_SIZE] = {};
    ~Easy() {
        if (headers) curl_slist_free_all(headers);
        if (h) curl_easy_cleanup(h);
    }
};

/// State shared by the callbacks of one transfer.
struct Transfer {
    Easy* easy = nullptr;
    HttpResponse resp;
    const HttpSink* sink = nullptr;  ///< null: collect the body in resp.body
    size_t max_body = 0;
    bool started = false;            ///< on_start was called
    bool stopped = false;            ///< the sink asked to stop
    bool too_big = false;
};

size_t on_header(char* data, size_t size, size_t n, void* user) {
    auto* t = static_cast<Transfer*>(user);
    std::string line(data, size * n);
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
    if (line.rfind("HTTP/", 0) == 0) {
        t->resp.headers.clear();  // a new response (after a redirect or a 100 Continue)
    } else if (const size_t colon = line.find(':'); colon != std::string::npos) {
        std::string name = line.substr(0, colon);
        std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
        const size_t v = line.find_first_not_of(" \t", colon + 1);
        t->resp.headers[name] = v == std::string::npos ? std::string() : line.substr(v);
    }
    return size * n;
}

void fill_status(Transfer& t) {
    curl_easy_getinfo(t.easy->h, CURLINFO_RESPONSE_CODE, &t.resp.status);
    const char* url = nullptr;
    if (curl_easy_getinfo(t.easy->h, CURLINFO_EFFECTIVE_URL, &url) == CURLE_OK && url) t.resp.url = url;
}

size_t on_body(char* data, size_t size, size_t n, void* user) {
    auto* t = static_cast<Transfer*>(user);
    const size_t bytes = size * n;
    if (!t->sink) {
        if (t->resp.body.size() + bytes > t->max_body) {
            t->too_big = true;
            return 0;
        }
        t->resp.body.append(data, bytes);
        return bytes;
    }
    if (!t->started) {
        t->started = true;
        fill_status(*t);
        if (t->sink->on_start && !t->sink->on_start(t->resp)) {
            t->stopped = true;
            return 0;
        }
    }
    if (!t->sink->on_data(data, bytes)) {
        t->stopped = true;
        return 0;
    }
    return bytes;
}

void setup(Easy& e, Transfer& t, const std::string& url, const HttpOptions& o) {
    global_init();
    e.h = curl_easy_init();
    if (!e.h) fail("libcurl could not create a request handle (out of memory?)");
    t.easy = &e;
    curl_easy_setopt(e.h, CURLOPT_URL, url.c_str());
    curl_easy_setopt(e.h, CURLOPT_ERRORBUFFER, e.errbuf);
    curl_easy_setopt(e.h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e.h, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(e.h, CURLOPT_MAXREDIRS, 10L);
    curl_easy_setopt(e.h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e.h, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e.h, CURLOPT_CONNECTTIMEOUT, o.connect_timeout_s);
    curl_easy_setopt(e.h, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(e.h, CURLOPT_LOW_SPEED_TIME, o.stall_timeout_s);
    const std::string agent = std::string("nitro/") + version();
    curl_easy_setopt(e.h, CURLOPT_USERAGENT, agent.c_str());  // libcurl copies option strings
    if (!o.bearer_token.empty())
        e.headers = curl_slist_append(e.headers, ("Authorization: Bearer " + o.bearer_token).c_str());
    if (!o.accept.empty()) e.headers = curl_slist_append(e.headers, ("Accept: " + o.accept).c_str());
    if (e.headers) curl_easy_setopt(e.h, CURLOPT_HTTPHEADER, e.headers);
    curl_easy_setopt(e.h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e.h, CURLOPT_HEADERDATA, &t);
    curl_easy_setopt(e.h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e.h, CURLOPT_WRITEDATA, &t);
}

/// Runs the transfer; throws NetworkError unless it ended with an HTTP answer (or a sink's stop).
void perform(Easy& e, Transfer& t, const std::string& url) {
    const CURLcode rc = curl_easy_perform(e.h);
    fill_status(t);
    if (rc == CURLE_OK || (rc == CURLE_WRITE_ERROR && t.stopped)) return;
    if (t.too_big) throw NetworkError(fmt::format("GET {}: the answer is larger than {} bytes", url, t.max_body), true);
    const std::string why = e.errbuf[0] ? e.errbuf : curl_easy_strerror(rc);
    throw NetworkError(fmt::format("GET {}: {}", url, why), t.resp.status != 0);
}

}  // namespace

std::string HttpResponse::header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? std::string() : it->second;
}

HttpResponse http_get(const std::string& url, const HttpOptions& o, size_t max_body) {
    Easy e;
    Transfer t;
    t.max_body = max_body;
    setup(e, t, url, o);
    perform(e, t, url);
    return std::move(t.resp);
}

HttpResponse http_stream(const std::string& url, uint64_t range_from, const HttpOptions& o, const HttpSink& sink) {
    Easy e;
    Transfer t;
    t.sink = &sink;
    setup(e, t, url, o);
    // CURLOPT_RANGE rather than CURLOPT_RESUME_FROM: a server that answers 200 with the whole file
    // is then the caller's to handle (start over), not a libcurl error.
    const std::string range = std::to_string(range_from) + "-";
    if (range_from > 0) curl_easy_setopt(e.h, CURLOPT_RANGE, range.c_str());
    perform(e, t, url);
    return std::move(t.resp);
}

std::string url_encode_path(const std::string& path) {
    static const char* hex = "0123456789ABCDEF";
    std::string out;
    for (unsigned char c : path) {
        const bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
        if (alnum || c == '-' || c == '_' || c == '.' || c == '~' || c == '/') {
            out += static_cast<char>(c);
        } else {
            out += '%';
            out += hex[c >> 4];
            out += hex[c & 15];
        }
    }
    return out;
}

}  // namespace nitro::hub
