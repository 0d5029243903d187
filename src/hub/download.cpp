#include "hub/download.h"

#include "core/text.h"
#include "core/error.h"
#include "core/sha256.h"
#include "hub/hub_api.h"
#include "hub/progress.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include <unistd.h>

namespace nitro::hub {

namespace fs = std::filesystem;

namespace {

void say(const HubConfig& cfg, const std::string& line) {
    if (cfg.note) cfg.note(line);
}

/// The partial file, opened for appending; reopen(true) empties it.
class PartFile {
public:
    explicit PartFile(const fs::path& p) : path_(p) { reopen(false); }
    ~PartFile() {
        if (f_) std::fclose(f_);
    }
    void reopen(bool truncate) {
        if (f_) std::fclose(f_);
        f_ = std::fopen(path_.c_str(), truncate ? "wb" : "ab");
        if (!f_) fail("cannot write '{}': {}", path_.string(), std::strerror(errno));
        std::setvbuf(f_, nullptr, _IOFBF, 1 << 20);
    }
    bool write(const char* p, size_t n) { return std::fwrite(p, 1, n, f_) == n; }
    void flush() {
        if (std::fflush(f_) != 0) fail("cannot write '{}': {}", path_.string(), std::strerror(errno));
    }
    void close() {
        const int rc = std::fclose(f_);
        f_ = nullptr;
        if (rc != 0) fail("cannot write '{}': {}", path_.string(), std::strerror(errno));
    }

private:
    fs::path path_;
    std::FILE* f_ = nullptr;
};

/// Feeds the first `n` bytes of `p` (a partial download) to `h`.
void hash_existing(const fs::path& p, uint64_t n, Sha256& h) {
    std::FILE* f = std::fopen(p.c_str(), "rb");
    if (!f) fail("cannot read '{}': {}", p.string(), std::strerror(errno));
    std::vector<char> buf(4 << 20);
    uint64_t left = n;
    while (left > 0) {
        const size_t want = static_cast<size_t>(std::min<uint64_t>(left, buf.size()));
        const size_t got = std::fread(buf.data(), 1, want, f);
        if (got == 0) {
            std::fclose(f);
            fail("cannot read '{}': it ended before {} bytes", p.string(), n);
        }
        h.update(buf.data(), got);
        left -= got;
    }
    std::fclose(f);
}

/// The first byte of a 206 answer's "Content-Range: bytes FIRST-LAST/TOTAL" (-1 if unreadable).
long long range_start(const HttpResponse& r) {
    const std::string cr = r.header("content-range");
    const size_t sp = cr.find(' ');
    if (cr.rfind("bytes", 0) != 0 || sp == std::string::npos) return -1;
    try {
        return std::stoll(cr.substr(sp + 1));
    } catch (const std::exception&) {
        return -1;
    }
}

}  // namespace

uint64_t download_blob(const BlobDownload& d, const HubConfig& cfg) {
    std::error_code ec;
    uint64_t have = fs::exists(d.incomplete, ec) ? fs::file_size(d.incomplete, ec) : 0;
    if (ec) have = 0;
    PartFile out(d.incomplete);
    if (have > d.size) {  // not this file's beginning: start over
        out.reopen(true);
        have = 0;
    }
    Sha256 hash;
    if (have > 0) {
        say(cfg, fmt::format("{}: resuming at {} of {} (checking the part downloaded before)", d.file, format_bytes(have),
                             format_bytes(d.size)));
        hash_existing(d.incomplete, have, hash);
    }
    const bool draw = cfg.draw_progress && ::isatty(STDERR_FILENO);
    if (!draw) say(cfg, fmt::format("{}: downloading {} from {}", d.file, format_bytes(d.size - have), d.repo));
    DownloadProgress progress(d.file, d.size, have, draw);
    uint64_t fetched = 0;
    const HttpOptions opts = hub_http_options(cfg);

    for (int attempt = 0; have < d.size;) {
        bool overflow = false, bad_range = false, write_failed = false;
        HttpSink sink;
        sink.on_start = [&](const HttpResponse& r) {
            if (r.status == 206) {
                bad_range = range_start(r) != static_cast<long long>(have);
                return !bad_range;
            }
            if (r.status != 200) return false;  // an error answer: reported below
            if (have > 0) {                     // the server ignored the Range: take the whole file again
                say(cfg, fmt::format("{}: the server does not resume downloads; starting over", d.file));
                out.reopen(true);
                hash = Sha256();
                have = 0;
            }
            return true;
        };
        sink.on_data = [&](const char* p, size_t n) {
            if (have + n > d.size) return !(overflow = true);
            if (!out.write(p, n)) return !(write_failed = true);
            hash.update(p, n);
            have += n;
            fetched += n;
            progress.update(have);
            return true;
        };
        std::string broke;
        try {
            const HttpResponse r = http_stream(d.url, have, opts, sink);
            if (write_failed) fail("cannot write '{}': {}", d.incomplete.string(), std::strerror(errno));
            if (overflow) fail("{}: the server sent more than the {} bytes the Hub lists for {}", d.repo, d.size, d.file);
            if (bad_range)
                fail("{}: asked for {} from byte {}, the server answered '{}'", d.repo, d.file, have, r.header("content-range"));
            if (r.status == 416 && have > 0) {  // nothing past `have` (the file changed?): start over
                out.reopen(true);
                hash = Sha256();
                have = 0;
                broke = "the server could not resume (HTTP 416); starting over";
            } else if (r.status != 200 && r.status != 206) {
                fail_http(r, "the file " + d.file, d.repo, cfg);
            } else if (have < d.size) {
                broke = fmt::format("the answer ended after {} of {} bytes", have, d.size);
            }
        } catch (const NetworkError& e) {
            broke = e.what();
        }
        if (broke.empty()) continue;
        out.flush();
        if (++attempt > cfg.retries) {
            progress.finish();
            fail("{}: the download of {} broke off at {} of {} ({}); the part is kept in '{}': run the same command "
                 "again to resume from there",
                 d.repo, d.file, format_bytes(have), format_bytes(d.size), broke, d.incomplete.string());
        }
        const double wait = std::min(30.0, cfg.retry_wait_s * (1 << std::min(attempt - 1, 5)));
        if (draw) std::fputc('\n', stderr);
        say(cfg, fmt::format("{}: connection lost at {} of {} ({}); resuming in {:.0f} s (retry {} of {})", d.file,
                             format_bytes(have), format_bytes(d.size), broke, wait, attempt, cfg.retries));
        std::this_thread::sleep_for(std::chrono::duration<double>(wait));
    }
    out.close();
    progress.finish();
    if (!draw)
        say(cfg, fmt::format("{}: {} in {} ({}/s)", d.file, format_bytes(fetched), format_duration(progress.elapsed_s()),
                             format_bytes(static_cast<uint64_t>(progress.average_rate()))));

    if (!d.sha256.empty()) {
        const std::string got = hash.hex_digest();
        if (got != d.sha256) {
            fs::remove(d.incomplete, ec);
            fail("{}: the SHA-256 of the downloaded {} is {}, but the Hub lists {}: the file was damaged on the way; "
                 "it has been deleted, run the same command again to download it anew",
                 d.repo, d.file, got, d.sha256);
        }
    }
    fs::rename(d.incomplete, d.blob, ec);
    if (ec) fail("cannot move '{}' to '{}': {}", d.incomplete.string(), d.blob.string(), ec.message());
    return fetched;
}

}  // namespace nitro::hub
