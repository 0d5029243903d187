#include "hub/hf_cache.h"

#include "core/error.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

namespace nitro::hub {

namespace fs = std::filesystem;

namespace {

bool is_commit(const std::string& s) {
    return s.size() == 40 && std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

void make_dirs(const fs::path& p) {
    std::error_code ec;
    fs::create_directories(p, ec);
    if (ec) fail("cannot create the folder '{}': {}", p.string(), ec.message());
}

}  // namespace

RepoCache::RepoCache(fs::path cache_dir, const std::string& repo) : cache_dir_(std::move(cache_dir)) {
    folder_ = "models--" + repo;
    for (size_t at = folder_.find('/'); at != std::string::npos; at = folder_.find('/', at)) folder_.replace(at, 1, "--");
    dir_ = cache_dir_ / folder_;
}

fs::path RepoCache::blob(const std::string& oid) const { return dir_ / "blobs" / oid; }

fs::path RepoCache::incomplete(const std::string& oid) const { return dir_ / "blobs" / (oid + ".incomplete"); }

fs::path RepoCache::snapshot(const std::string& commit, const std::string& file) const {
    return dir_ / "snapshots" / commit / fs::path(file);
}

fs::path RepoCache::lock_path(const std::string& oid) const { return cache_dir_ / ".locks" / folder_ / (oid + ".lock"); }

std::string RepoCache::ref(const std::string& name) const {
    std::ifstream f(dir_ / "refs" / name);
    std::string commit;
    if (!f || !std::getline(f, commit)) return {};
    while (!commit.empty() && (commit.back() == '\r' || commit.back() == ' ')) commit.pop_back();
    return is_commit(commit) ? commit : std::string();
}

void RepoCache::set_ref(const std::string& commit, const std::string& name) const {
    if (ref(name) == commit) return;  // unchanged: no write (the cache may be read-only)
    const fs::path p = dir_ / "refs" / name, tmp = p.string() + ".tmp";
    make_dirs(p.parent_path());
    {
        std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
        f << commit;  // huggingface_hub writes the bare hash, no newline
        if (!f.flush()) fail("cannot write '{}'", tmp.string());
    }
    std::error_code ec;
    fs::rename(tmp, p, ec);
    if (ec) fail("cannot write '{}': {}", p.string(), ec.message());
}

void RepoCache::link(const std::string& commit, const std::string& file, const std::string& oid) const {
    const fs::path dst = snapshot(commit, file), src = blob(oid);
    make_dirs(dst.parent_path());
    std::error_code ec;
    fs::remove(dst, ec);
    // relative and lexical, as huggingface_hub's os.path.relpath: ../../blobs/OID
    const fs::path rel = fs::absolute(src).lexically_relative(fs::absolute(dst.parent_path()));
    fs::create_symlink(rel, dst, ec);
    if (ec) fail("cannot create the symlink '{}' -> '{}': {}", dst.string(), rel.string(), ec.message());
}

std::vector<RepoFile> RepoCache::snapshot_files(const std::string& commit) const {
    std::vector<RepoFile> files;
    const fs::path root = dir_ / "snapshots" / commit;
    std::error_code ec;
    if (commit.empty() || !fs::is_directory(root, ec)) return files;
    for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
        std::error_code fe;
        if (!fs::is_regular_file(it->path(), fe)) continue;  // follows the link; a dangling one is left out
        RepoFile f;
        f.path = it->path().lexically_relative(root).generic_string();
        f.size = fs::file_size(it->path(), fe);
        files.push_back(std::move(f));
    }
    std::sort(files.begin(), files.end(), [](const RepoFile& a, const RepoFile& b) { return a.path < b.path; });
    return files;
}

FileLock::FileLock(const fs::path& path, const std::function<void()>& waiting) {
    make_dirs(path.parent_path());
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) fail("cannot open the lock file '{}': {}", path.string(), std::strerror(errno));
    if (::flock(fd_, LOCK_EX | LOCK_NB) == 0) return;
    if (errno == EWOULDBLOCK && waiting) waiting();
    while (::flock(fd_, LOCK_EX) != 0) {
        if (errno == EINTR) continue;
        const int err = errno;
        ::close(fd_);
        fail("cannot lock '{}': {}", path.string(), std::strerror(err));
    }
}

FileLock::~FileLock() {
    if (fd_ >= 0) ::close(fd_);  // closing the descriptor releases the flock
}

}  // namespace nitro::hub
