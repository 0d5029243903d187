// Read-only memory-mapped files.
//
// Opening maps the whole file but touches no pages: a 60 GB model costs nothing until its bytes
// are read. The mapping lives as long as the MappedFile.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace nitro {

class MappedFile {
public:
    /// Maps `path` read-only. Throws nitro::Error naming the file if it cannot be opened or mapped.
    explicit MappedFile(const std::string& path);
    ~MappedFile();
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;
    MappedFile(MappedFile&& o) noexcept;
    MappedFile& operator=(MappedFile&& o) noexcept;

    const uint8_t* data() const { return data_; }
    /// Size in bytes.
    size_t size() const { return size_; }
    const std::string& path() const { return path_; }

private:
    void release();
    std::string path_;
    const uint8_t* data_ = nullptr;
    size_t size_ = 0;
};

}  // namespace nitro
