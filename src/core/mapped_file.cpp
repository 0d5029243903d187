#include "core/mapped_file.h"

#include "core/error.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <utility>

namespace nitro {

namespace {

MapOptions g_model{false, false, HugePages::Thp};
std::mutex g_default_mu;

constexpr size_t kHuge = size_t{2} << 20;

std::string gib(size_t bytes) {
    char b[32];
    std::snprintf(b, sizeof b, "%.2f GiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
    return b;
}

std::string memlock_limit() {
    rlimit r{};
    if (getrlimit(RLIMIT_MEMLOCK, &r) != 0) return "unknown";
    if (r.rlim_cur == RLIM_INFINITY) return "unlimited";
    char b[32];
    std::snprintf(b, sizeof b, "%llu KiB", static_cast<unsigned long long>(r.rlim_cur / 1024));
    return b;
}

/// Reads the whole file into `dst` (size bytes).
void read_all(int fd, const std::string& path, uint8_t* dst, size_t size) {
    size_t done = 0;
    while (done < size) {
        const size_t want = std::min<size_t>(size - done, size_t{64} << 20);
        const ssize_t got = ::pread(fd, dst + done, want, static_cast<off_t>(done));
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) fail("cannot read '{}' at byte {} of {}: {}", path, done, size, got < 0 ? std::strerror(errno) : "unexpected end of file");
        done += static_cast<size_t>(got);
    }
}

}  // namespace

MemInfo read_meminfo() {
    MemInfo m;
    std::ifstream f("/proc/meminfo");
    for (std::string line; std::getline(f, line);) {
        const auto kib = [&](const char* key) -> uint64_t { return 1024ull * std::strtoull(line.c_str() + std::strlen(key), nullptr, 10); };
        if (line.rfind("MemTotal:", 0) == 0) m.total = kib("MemTotal:");
        else if (line.rfind("MemAvailable:", 0) == 0) m.available = kib("MemAvailable:");
    }
    return m;
}

MapOptions model_map_options() {
    std::lock_guard<std::mutex> lk(g_default_mu);
    return g_model;
}

void set_model_map_options(const MapOptions& o) {
    std::lock_guard<std::mutex> lk(g_default_mu);
    g_model = o;
}

const char* huge_pages_name(HugePages h) {
    switch (h) {
        case HugePages::Off: return "off";
        case HugePages::Thp: return "thp";
        case HugePages::Explicit: return "explicit";
    }
    return "?";
}

HugePages parse_huge_pages(const std::string& s) {
    if (s == "off") return HugePages::Off;
    if (s == "thp") return HugePages::Thp;
    if (s == "explicit") return HugePages::Explicit;
    fail("huge pages: '{}' is not one of thp, explicit, off", s);
}

MappedFile::MappedFile(const std::string& path, const MapOptions& opt) : path_(path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail("cannot open '{}': {}", path, std::strerror(errno));
    struct Closer {
        int fd;
        ~Closer() { ::close(fd); }
    } closer{fd};
    struct stat st {};
    if (::fstat(fd, &st) != 0) fail("cannot stat '{}': {}", path, std::strerror(errno));
    if (!S_ISREG(st.st_mode)) fail("'{}' is not a regular file", path);
    size_ = static_cast<size_t>(st.st_size);
    if (size_ == 0) return;
    const bool copy = opt.no_mmap || opt.huge_pages == HugePages::Explicit;
    if (!copy) {
        void* p = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) fail("cannot map '{}' ({} bytes): {}", path, size_, std::strerror(errno));
        data_ = static_cast<const uint8_t*>(p);
        map_bytes_ = size_;
        // A hint: the page cache holds huge pages only on kernels that support them there.
        if (opt.huge_pages == HugePages::Thp) ::madvise(p, size_, MADV_HUGEPAGE);
    } else {
        map_bytes_ = (size_ + kHuge - 1) / kHuge * kHuge;
        void* p = MAP_FAILED;
        if (opt.huge_pages == HugePages::Explicit) {
            p = ::mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
            if (p == MAP_FAILED)
                fail("--hugepages explicit: cannot map {} of 2 MiB huge pages for '{}': {} (the pool needs {} free pages: "
                     "see /proc/meminfo HugePages_Free; e.g. echo {} | sudo tee /proc/sys/vm/nr_hugepages)",
                     gib(map_bytes_), path, std::strerror(errno), map_bytes_ / kHuge, map_bytes_ / kHuge);
        } else {
            // Over-allocate by 2 MiB to align the start, so whole huge pages can back it.
            const size_t over = map_bytes_ + kHuge;
            void* raw = ::mmap(nullptr, over, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
            if (raw == MAP_FAILED) fail("--no-mmap: cannot allocate {} for '{}': {}", gib(map_bytes_), path, std::strerror(errno));
            const auto a = reinterpret_cast<uintptr_t>(raw);
            const uintptr_t aligned = (a + kHuge - 1) / kHuge * kHuge;
            if (aligned > a) ::munmap(raw, aligned - a);
            const uintptr_t end = a + over, want_end = aligned + map_bytes_;
            if (end > want_end) ::munmap(reinterpret_cast<void*>(want_end), end - want_end);
            p = reinterpret_cast<void*>(aligned);
            if (opt.huge_pages == HugePages::Thp) ::madvise(p, map_bytes_, MADV_HUGEPAGE);
        }
        try {
            read_all(fd, path, static_cast<uint8_t*>(p), size_);
        } catch (...) {
            ::munmap(p, map_bytes_);
            throw;
        }
        ::mprotect(p, map_bytes_, PROT_READ);
        data_ = static_cast<const uint8_t*>(p);
        copied_ = true;
    }
    if (opt.mlock) {
        if (::mlock(data_, size_) == 0) {
            locked_ = true;
        } else {
            const int e = errno;
            std::fprintf(stderr,
                         "warning: --mlock: cannot lock %s of '%s' in RAM: %s (locked-memory limit: %s). Raise it with "
                         "`ulimit -l unlimited` (or LimitMEMLOCK=infinity for a systemd service, memlock in "
                         "/etc/security/limits.conf), or run without --mlock. Continuing unlocked.\n",
                         gib(size_).c_str(), path.c_str(), std::strerror(e), memlock_limit().c_str());
        }
    }
}

MappedFile::~MappedFile() { release(); }

MappedFile::MappedFile(MappedFile&& o) noexcept
    : path_(std::move(o.path_)), data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)),
      map_bytes_(std::exchange(o.map_bytes_, 0)), copied_(o.copied_), locked_(o.locked_) {}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
    if (this != &o) {
        release();
        path_ = std::move(o.path_);
        data_ = std::exchange(o.data_, nullptr);
        size_ = std::exchange(o.size_, 0);
        map_bytes_ = std::exchange(o.map_bytes_, 0);
        copied_ = o.copied_;
        locked_ = o.locked_;
    }
    return *this;
}

void MappedFile::release() {
    if (data_) ::munmap(const_cast<uint8_t*>(data_), map_bytes_);  // also unlocks
    data_ = nullptr;
    size_ = 0;
    map_bytes_ = 0;
}

}  // namespace nitro
