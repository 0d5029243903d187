// GGUF v3 writer that streams tensor data to disk.
//
// Usage: set metadata, declare every tensor (name, type, shape), then `open()` writes the header
// and `write_data()` streams each tensor's bytes in declaration order, in chunks of any size, so a
// 60 GB model never needs to be held in memory. `finish()` checks that every byte was written and
// atomically renames the temporary file into place: a failed write never leaves a partial model
// under the final name.
#pragma once

#include "gguf/gguf.h"

#include <cstdio>
#include <span>
#include <string>
#include <vector>

namespace nitro {

class GgufWriter {
public:
    /// `alignment` in bytes (power of two); written as general.alignment when not 32.
    explicit GgufWriter(uint32_t alignment = 32);
    ~GgufWriter();
    GgufWriter(const GgufWriter&) = delete;
    GgufWriter& operator=(const GgufWriter&) = delete;

    GgufMetadata& metadata() { return meta_; }

    /// Declares a tensor. `ne` in ggml order (ne[0] fastest), 1..4 dims. Throws nitro::Error on a
    /// duplicate name, a bad shape, or a row length that is not a multiple of the block size.
    void add_tensor(const std::string& name, GgmlType type, std::span<const int64_t> ne);
    /// Declared tensors with their offsets (valid once all are declared).
    const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }

    /// Creates `path` (via `path.tmp`) and writes the header. Throws nitro::Error on I/O failure.
    void open(const std::string& path);
    /// Appends bytes to the current tensor; moves to the next tensor when one is full.
    /// Throws nitro::Error if more bytes are given than the declared tensors hold.
    void write_data(const void* data, size_t n);
    /// Index of the tensor the next write_data() bytes go to (== tensors().size() when done).
    size_t current_tensor() const { return cur_; }
    /// Checks every declared byte was written, flushes and renames into place.
    void finish();

private:
    void write_raw(const void* p, size_t n);
    void pad_to(uint64_t multiple);

    uint32_t alignment_;
    GgufMetadata meta_;
    std::vector<GgufTensorInfo> tensors_;
    uint64_t data_size_ = 0;
    std::FILE* f_ = nullptr;
    std::string path_, tmp_path_;
    uint64_t pos_ = 0;           // bytes written to the file
    uint64_t data_start_ = 0;    // file offset of the data section
    size_t cur_ = 0;             // tensor being written
    uint64_t cur_written_ = 0;   // bytes of it written so far
};

/// Serialises one metadata value (type tag excluded) as GGUF bytes; used by the writer and tests.
void gguf_encode_value(std::vector<uint8_t>& out, const GgufValue& v);

}  // namespace nitro
