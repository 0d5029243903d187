#include "hub/hub_api.h"

#include "core/error.h"

#include <nlohmann/json.hpp>

#include <algorithm>

namespace nitro::hub {

namespace {

using json = nlohmann::json;

bool is_commit(const std::string& s) {
    return s.size() == 40 && std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

bool is_hex(const std::string& s, size_t n) {
    return s.size() == n && std::all_of(s.begin(), s.end(), [](char c) {
               return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
           });
}

/// A repository path that stays inside the snapshot folder: relative, no "." or ".." parts.
bool safe_repo_path(const std::string& p) {
    if (p.empty() || p.front() == '/' || p.find('\\') != std::string::npos || p.find('\0') != std::string::npos) return false;
    size_t start = 0;
    while (start <= p.size()) {
        const size_t slash = std::min(p.find('/', start), p.size());
        const std::string part = p.substr(start, slash - start);
        if (part.empty() || part == "." || part == "..") return false;
        start = slash + 1;
    }
    return true;
}

/// GET a JSON answer; HTTP errors go to fail_http, 5xx and 429 count as "the Hub is unreachable".
json get_json(const std::string& url, const std::string& what, const std::string& repo, const HubConfig& cfg,
              std::string* next_page = nullptr) {
    const HttpResponse r = http_get(url, hub_http_options(cfg, "application/json"));
    if (r.status >= 500 || r.status == 429)
        throw NetworkError(fmt::format("{} answered HTTP {} to GET {}", cfg.endpoint, r.status, url), true);
    if (r.status != 200) fail_http(r, what, repo, cfg);
    if (next_page) {
        // Link: <https://huggingface.co/api/models/...&cursor=...>; rel="next"
        next_page->clear();
        const std::string link = r.header("link");
        const size_t rel = link.find("rel=\"next\"");
        if (rel != std::string::npos) {
            const size_t close = link.rfind('>', rel), open = close == std::string::npos ? close : link.rfind('<', close);
            if (open != std::string::npos) *next_page = link.substr(open + 1, close - open - 1);
        }
    }
    try {
        return json::parse(r.body);
    } catch (const json::exception& e) {
        fail("the answer of {} to GET {} is not JSON ({})", cfg.endpoint, url, e.what());
    }
}

RepoFile file_from_entry(const json& e) {
    RepoFile f;
    f.path = e["path"].get<std::string>();
    if (e.contains("size") && e["size"].is_number_unsigned()) f.size = e["size"].get<uint64_t>();
    if (e.contains("oid") && e["oid"].is_string()) f.oid = e["oid"].get<std::string>();
    if (e.contains("lfs") && e["lfs"].is_object()) {
        const json& l = e["lfs"];
        if (l.contains("oid") && l["oid"].is_string()) f.sha256 = l["oid"].get<std::string>();
        if (l.contains("size") && l["size"].is_number_unsigned()) f.size = l["size"].get<uint64_t>();
    }
    std::transform(f.sha256.begin(), f.sha256.end(), f.sha256.begin(), [](unsigned char c) { return std::tolower(c); });
    return f;
}

}  // namespace

HttpOptions hub_http_options(const HubConfig& cfg, const std::string& accept) {
    HttpOptions o;
    o.bearer_token = cfg.token;
    o.accept = accept;
    return o;
}

void fail_http(const HttpResponse& r, const std::string& what, const std::string& repo, const HubConfig& cfg) {
    const std::string code = r.header("x-error-code"), message = r.header("x-error-message");
    std::string said = fmt::format("HTTP {}", r.status);
    if (!code.empty()) said += " " + code;
    if (!message.empty()) said += ": " + message;
    const std::string page = cfg.endpoint + "/" + repo;
    const std::string token = cfg.token.empty() ? std::string("no token is set")
                                                : fmt::format("the token from {} was sent", cfg.token_source);
    if (code == "GatedRepo" || r.status == 403)
        fail("{}: cannot download {} ({}): the repository is gated; accept its license at {} while logged in to "
             "Hugging Face, and set HF_TOKEN to an access token of that account ({})",
             repo, what, said, page, token);
    if (r.status == 401 && message.find("Invalid credentials") != std::string::npos)
        fail("{}: the Hub refused the token from {} ({}): check HF_TOKEN (a token from {}/settings/tokens)", repo,
             cfg.token_source, said, cfg.endpoint);
    if (code == "RepoNotFound" || r.status == 401 || (r.status == 404 && what == "the repository"))
        fail("{}: no such repository on {} ({}): check the name at {}; a private or gated repository also needs "
             "HF_TOKEN ({})",
             repo, cfg.endpoint, said, page, token);
    if (code == "RevisionNotFound") fail("{}: the repository has no branch 'main' ({})", repo, said);
    if (r.status == 404 || code == "EntryNotFound") fail("{}: {} is not on the Hub ({}); see {}", repo, what, said, page);
    fail("{}: cannot get {} from {} ({})", repo, what, cfg.endpoint, said);
}

RepoListing fetch_listing(const std::string& repo, const HubConfig& cfg) {
    RepoListing out;
    const json info = get_json(cfg.endpoint + "/api/models/" + repo + "/revision/main", "the repository", repo, cfg);
    if (info.is_object() && info.contains("sha") && info["sha"].is_string()) out.commit = info["sha"].get<std::string>();
    if (!is_commit(out.commit))
        fail("{}: the answer of {} about the repository names no commit (\"sha\": 40 hex digits)", repo, cfg.endpoint);

    std::string url = cfg.endpoint + "/api/models/" + repo + "/tree/" + out.commit + "?recursive=true";
    for (int page = 0; !url.empty(); ++page) {
        if (page > 10000) fail("{}: the file listing of {} does not end (more than 10000 pages)", repo, cfg.endpoint);
        std::string next;
        const json entries = get_json(url, "the file listing", repo, cfg, &next);
        if (!entries.is_array()) fail("{}: the file listing of {} is not a JSON array", repo, cfg.endpoint);
        for (const json& e : entries) {
            if (!e.is_object() || e.value("type", "") != "file" || !e.contains("path") || !e["path"].is_string()) continue;
            RepoFile f = file_from_entry(e);
            if (!safe_repo_path(f.path) || (!f.sha256.empty() && !is_hex(f.sha256, 64)) ||
                (f.sha256.empty() && !is_hex(f.oid, 40) && !is_hex(f.oid, 64)))
                continue;  // a path outside the snapshot or an id that cannot name a blob: never written
            out.files.push_back(std::move(f));
        }
        url = next;
    }
    return out;
}

}  // namespace nitro::hub
