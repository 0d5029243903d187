#include "hub/hub.h"

#include "core/text.h"
#include "core/error.h"
#include "hub/download.h"
#include "hub/hf_cache.h"
#include "hub/hub_api.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>

namespace nitro::hub {

namespace fs = std::filesystem;

namespace {

std::string env(const char* name) {
    const char* v = std::getenv(name);
    return v ? std::string(v) : std::string();
}

/// huggingface_hub's _is_true: 1, ON, YES, TRUE in any case.
bool env_true(const char* name) {
    std::string v = env(name);
    for (char& c : v) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return v == "1" || v == "ON" || v == "YES" || v == "TRUE";
}

fs::path home() {
    const std::string h = env("HOME");
    if (h.empty()) fail("HOME is not set, so the Hugging Face cache (~/.cache/huggingface/hub) has no place: set HF_HOME");
    return h;
}

fs::path hf_home() {
    if (std::string h = env("HF_HOME"); !h.empty()) return h;
    if (std::string x = env("XDG_CACHE_HOME"); !x.empty()) return fs::path(x) / "huggingface";
    return home() / ".cache" / "huggingface";
}

void say(const HubConfig& cfg, const std::string& line) {
    if (cfg.note) cfg.note(line);
}

/// The model from the cache alone: refs/main's snapshot, the same choice of file.
PullResult from_cache(const ModelRef& ref, const RepoCache& cache, const HubConfig& cfg, const std::string& why) {
    const std::string commit = cache.ref("main");
    const std::vector<RepoFile> files = cache.snapshot_files(commit);
    if (files.empty())
        fail("{}, and {} is not in the Hugging Face cache ({}): run `nitro pull {}` where the Hub can be reached", why,
             ref.repo, cache.dir().string(), ref.text());
    const std::vector<RepoFile> picked = pick_model_files(files, ref, fmt::format("the cached copy of {} ({})", ref.repo, cache.dir().string()));
    PullResult r;
    r.commit = commit;
    r.offline = true;
    for (const RepoFile& f : picked) {
        r.files.push_back(f.path);
        r.bytes += f.size;
    }
    r.path = cache.snapshot(commit, picked.front().path).string();
    say(cfg, fmt::format("{}: using the cached {} ({})", why, r.files.front(), format_bytes(r.bytes)));
    return r;
}

bool has_size(const fs::path& p, uint64_t size) {
    std::error_code ec;
    return fs::is_regular_file(p, ec) && fs::file_size(p, ec) == size && !ec;
}

/// Makes snapshots/COMMIT/FILE present; returns the bytes downloaded.
uint64_t fetch_file(const ModelRef& ref, const RepoFile& f, const std::string& commit, const RepoCache& cache,
                    const HubConfig& cfg) {
    const fs::path pointer = cache.snapshot(commit, f.path);
    if (has_size(pointer, f.size)) return 0;
    const std::string oid = f.sha256.empty() ? f.oid : f.sha256;
    FileLock lock(cache.lock_path(oid), [&] { say(cfg, fmt::format("{}: waiting for another download of it to end", f.path)); });
    if (has_size(pointer, f.size)) return 0;  // the other download just finished it
    const fs::path blob = cache.blob(oid);
    std::error_code ec;
    if (fs::exists(blob, ec) && !has_size(blob, f.size)) {
        say(cfg, fmt::format("{}: the cached blob {} has the wrong size; downloading it again", f.path, blob.string()));
        fs::remove(blob, ec);
    }
    uint64_t fetched = 0;
    if (!has_size(blob, f.size)) {
        BlobDownload d;
        d.url = cfg.endpoint + "/" + ref.repo + "/resolve/" + commit + "/" + url_encode_path(f.path);
        d.repo = ref.repo;
        d.file = f.path;
        d.size = f.size;
        d.sha256 = f.sha256;
        d.incomplete = cache.incomplete(oid);
        d.blob = blob;
        fs::create_directories(blob.parent_path(), ec);
        if (ec) fail("cannot create the folder '{}': {}", blob.parent_path().string(), ec.message());
        fetched = download_blob(d, cfg);
    }
    cache.link(commit, f.path, oid);
    return fetched;
}

}  // namespace

HubConfig hub_config_from_env() {
    HubConfig c;
    if (std::string e = env("HF_ENDPOINT"); !e.empty()) c.endpoint = e;
    while (!c.endpoint.empty() && c.endpoint.back() == '/') c.endpoint.pop_back();
    if (std::string d = env("HF_HUB_CACHE"); !d.empty()) c.cache_dir = d;
    else if (std::string old = env("HUGGINGFACE_HUB_CACHE"); !old.empty()) c.cache_dir = old;
    else c.cache_dir = hf_home() / "hub";
    if (std::string t = env("HF_TOKEN"); !t.empty()) {
        c.token = t;
        c.token_source = "HF_TOKEN";
    } else {
        const std::string path_env = env("HF_TOKEN_PATH");
        const fs::path p = path_env.empty() ? hf_home() / "token" : fs::path(path_env);
        std::ifstream f(p);
        std::string line;
        if (f && std::getline(f, line)) {
            while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.pop_back();
            if (!line.empty()) {
                c.token = line;
                c.token_source = p.string();
            }
        }
    }
    c.offline = env_true("HF_HUB_OFFLINE");
    c.note = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
    return c;
}

PullResult pull(const ModelRef& ref, const HubConfig& cfg) {
    const RepoCache cache(cfg.cache_dir, ref.repo);
    if (cfg.offline) return from_cache(ref, cache, cfg, "HF_HUB_OFFLINE is set");
    RepoListing listing;
    try {
        listing = fetch_listing(ref.repo, cfg);
    } catch (const NetworkError& e) {
        return from_cache(ref, cache, cfg, fmt::format("cannot reach the Hub ({})", e.what()));
    }
    const std::vector<RepoFile> picked = pick_model_files(listing.files, ref, ref.repo);
    PullResult r;
    r.commit = listing.commit;
    for (const RepoFile& f : picked) {
        r.files.push_back(f.path);
        r.bytes += f.size;
    }
    for (const RepoFile& f : picked) {
        try {
            r.downloaded += fetch_file(ref, f, listing.commit, cache, cfg);
        } catch (const NetworkError& e) {  // not retried (e.g. the connection failed before an answer)
            fail("{}: the download of {} failed ({}); run the same command again to resume", ref.repo, f.path, e.what());
        }
    }
    // refs/main last: it must name a snapshot folder that exists (huggingface_hub's cache scan
    // refuses a ref to a missing snapshot), and an interrupted pull leaves the old one in place.
    cache.set_ref(listing.commit, "main");
    r.path = cache.snapshot(listing.commit, picked.front().path).string();
    return r;
}

PullResult pull(const std::string& spec) { return pull(parse_model_ref(spec), hub_config_from_env()); }

}  // namespace nitro::hub
