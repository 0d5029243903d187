// Test helper: writes raw GGUF bytes field by field, so tests can build files the writer would
// refuse to produce (bad magic, unknown types, overlapping tensors...).
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace nitro::test {

struct RawTensor {
    std::string name;
    std::vector<uint64_t> ne;
    uint32_t type = 0;
    uint64_t offset = 0;
};

struct RawGguf {
    uint32_t version = 3;
    std::vector<uint8_t> kv_bytes;  // already-encoded key/value pairs
    uint64_t n_kv = 0;
    std::vector<RawTensor> tensors;
    uint32_t alignment = 32;
    std::vector<uint8_t> data;      // the data section

    template <typename T>
    static void put(std::vector<uint8_t>& b, T v) {
        auto* p = reinterpret_cast<const uint8_t*>(&v);
        b.insert(b.end(), p, p + sizeof(T));
    }
    static void put_str(std::vector<uint8_t>& b, const std::string& s) {
        put<uint64_t>(b, s.size());
        b.insert(b.end(), s.begin(), s.end());
    }
    void kv_u32(const std::string& k, uint32_t v) {
        put_str(kv_bytes, k);
        put<uint32_t>(kv_bytes, 4);
        put<uint32_t>(kv_bytes, v);
        ++n_kv;
    }
    void kv_str(const std::string& k, const std::string& v) {
        put_str(kv_bytes, k);
        put<uint32_t>(kv_bytes, 8);
        put_str(kv_bytes, v);
        ++n_kv;
    }
    std::vector<uint8_t> bytes() const {
        std::vector<uint8_t> b{'G', 'G', 'U', 'F'};
        put<uint32_t>(b, version);
        put<uint64_t>(b, tensors.size());
        put<uint64_t>(b, n_kv);
        b.insert(b.end(), kv_bytes.begin(), kv_bytes.end());
        for (const auto& t : tensors) {
            put_str(b, t.name);
            put<uint32_t>(b, static_cast<uint32_t>(t.ne.size()));
            for (auto n : t.ne) put<uint64_t>(b, n);
            put<uint32_t>(b, t.type);
            put<uint64_t>(b, t.offset);
        }
        while (b.size() % alignment) b.push_back(0);
        b.insert(b.end(), data.begin(), data.end());
        return b;
    }
};

inline void write_file(const std::string& path, const std::vector<uint8_t>& b) {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (b.size()) std::fwrite(b.data(), 1, b.size(), f);
    std::fclose(f);
}

/// A fresh empty folder under the temp directory, removed (with its contents) when the test
/// process exits.
std::string temp_dir(const std::string& tag);

/// Runs a shell command and returns its standard output. Throws std::runtime_error (with the
/// command and its output) when it exits with a non-zero status.
std::string run_command(const std::string& cmd);

/// The message of the nitro::Error `f` throws, "" if it throws none.
std::string error_of(const std::function<void()>& f);

}  // namespace nitro::test
