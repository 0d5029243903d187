// Read-only views of whole files: memory-mapped (the default) or copied into anonymous memory.
//
// Mapping touches no pages: a 60 GB model costs nothing until its bytes are read, and the OS may
// drop clean pages again under memory pressure (they fault back in from the file: the 1,000-1,500
// faults per token seen after the OS trimmed expert pages). MapOptions trades that for residency,
// as llama.cpp's --no-mmap / --mlock do:
//   - no_mmap: read the file into anonymous memory (2 MiB aligned, transparent huge pages when
//     the OS allows, or explicit huge pages): fewer TLB misses while streaming experts, never
//     re-read from disk, but the load reads every byte up front;
//   - mlock: lock the pages in RAM (needs RLIMIT_MEMLOCK >= the file; refused with a warning that
//     says how to raise the limit, then the file is used unlocked);
//   - hugepages: thp (default) asks for transparent huge pages (madvise MADV_HUGEPAGE) on anonymous
//     copies, and on the file mapping as a hint (used only where the kernel supports huge pages in
//     the page cache); explicit maps hugetlbfs pages (MAP_HUGETLB, implies no_mmap; fails clearly
//     when the pool is empty); off asks for nothing.
// The mapping lives as long as the MappedFile.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace nitro {

enum class HugePages { Off, Thp, Explicit };

struct MapOptions {
    bool no_mmap = false;
    bool mlock = false;
    HugePages huge_pages = HugePages::Off;
};

/// The options model files (GgufFile, so GgufModel and Model) are opened with: by default mapped,
/// with the THP hint; the command line sets them once at startup (cli/memory_options.h), before
/// any model is opened. Other files (traces, safetensors) are plain mappings.
MapOptions model_map_options();
void set_model_map_options(const MapOptions& o);
/// The host's RAM as /proc/meminfo states it, bytes: MemTotal and MemAvailable (0 where the file
/// or the line is missing).
struct MemInfo {
    uint64_t total = 0;
    uint64_t available = 0;
};
MemInfo read_meminfo();

/// "thp" / "explicit" / "off"; parse_huge_pages throws nitro::Error for anything else.
const char* huge_pages_name(HugePages h);
HugePages parse_huge_pages(const std::string& s);

class MappedFile {
public:
    /// Maps or reads `path` read-only. Throws nitro::Error naming the file if it cannot be opened,
    /// mapped, allocated or read.
    explicit MappedFile(const std::string& path, const MapOptions& opt = {});
    ~MappedFile();
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;
    MappedFile(MappedFile&& o) noexcept;
    MappedFile& operator=(MappedFile&& o) noexcept;

    const uint8_t* data() const { return data_; }
    /// Size in bytes.
    size_t size() const { return size_; }
    const std::string& path() const { return path_; }
    /// True when the bytes were read into anonymous memory (no_mmap or explicit huge pages).
    bool copied() const { return copied_; }
    /// True when mlock succeeded.
    bool locked() const { return locked_; }

private:
    void release();
    std::string path_;
    const uint8_t* data_ = nullptr;
    size_t size_ = 0;
    size_t map_bytes_ = 0;  ///< length of the mapping (anonymous copies are rounded up to 2 MiB)
    bool copied_ = false, locked_ = false;
};

}  // namespace nitro
