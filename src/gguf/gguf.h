// GGUF v3 (and v2) reader: memory-mapped, validated, split-aware.
//
// Format: ggml/docs/gguf.md and ggml/src/gguf.cpp (llama.cpp). Little-endian:
//   magic "GGUF", u32 version, u64 n_tensors, u64 n_kv,
//   n_kv x (string key, u32 value type, value),
//   n_tensors x (string name, u32 n_dims, n_dims x u64 ne, u32 ggml type, u64 offset),
//   padding to general.alignment (default 32), then the data section.
// Opening parses only the header; tensor bytes stay untouched in the mapping until read.
// Every problem with a file is a nitro::Error naming the file, the tensor or key, and what was
// expected; nothing in a file can make the reader assert or crash.
#pragma once

#include "core/mapped_file.h"
#include "quant/types.h"

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

namespace nitro {

/// GGUF metadata value types (gguf_type in ggml/include/gguf.h).
enum class GgufType : uint32_t {
    UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6, BOOL = 7,
    STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};
/// "uint32", "string", "array", ... for messages.
const char* gguf_type_name(GgufType t);

struct GgufArray;

/// A metadata value: one scalar, a string or an array. Bools are stored as `bool`.
using GgufValue = std::variant<uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t, float, bool,
                               std::string, std::shared_ptr<GgufArray>, uint64_t, int64_t, double>;

/// An array value: one element type, elements in a typed vector (arrays may nest).
struct GgufArray {
    GgufType type = GgufType::UINT8;
    std::variant<std::vector<uint8_t>, std::vector<int8_t>, std::vector<uint16_t>,
                 std::vector<int16_t>, std::vector<uint32_t>, std::vector<int32_t>,
                 std::vector<float>, std::vector<bool>, std::vector<std::string>,
                 std::vector<GgufArray>, std::vector<uint64_t>, std::vector<int64_t>,
                 std::vector<double>>
        data;
    size_t size() const;
};

/// The type tag of a value.
GgufType gguf_value_type(const GgufValue& v);

/// Metadata of one file, in file order (order is kept so a re-write is byte-identical).
class GgufMetadata {
public:
    /// Adds or replaces a key, keeping first-insertion order.
    void set(const std::string& key, GgufValue value);
    bool has(const std::string& key) const { return index_.count(key) != 0; }
    const GgufValue* find(const std::string& key) const;
    const std::vector<std::pair<std::string, GgufValue>>& entries() const { return entries_; }

    /// Typed getters. A missing key gives nullopt; a key of another type throws nitro::Error
    /// naming the key and both types. Integer getters accept any integer type whose value fits.
    std::optional<std::string> get_string(const std::string& key) const;
    std::optional<int64_t> get_int(const std::string& key) const;
    std::optional<uint64_t> get_uint(const std::string& key) const;
    std::optional<double> get_float(const std::string& key) const;
    std::optional<bool> get_bool(const std::string& key) const;
    /// The array under `key`, or nullptr if absent; throws if the key is not an array.
    const GgufArray* get_array(const std::string& key) const;

    /// Name used in messages ("model.gguf").
    std::string source;

private:
    std::vector<std::pair<std::string, GgufValue>> entries_;
    std::unordered_map<std::string, size_t> index_;
};

/// ggml allows at most 4 dimensions.
constexpr int kGgufMaxDims = 4;

/// One tensor of a file: name, type, shape (ne[0] is the fastest-varying dimension, as in ggml),
/// and where its bytes are.
struct GgufTensorInfo {
    std::string name;
    GgmlType type = GgmlType::F32;
    int n_dims = 0;
    std::array<int64_t, kGgufMaxDims> ne{1, 1, 1, 1};
    uint64_t offset = 0;     ///< bytes from the start of the data section
    uint64_t n_bytes = 0;    ///< bytes of data
    int shard = 0;           ///< index of the file (split models) holding the bytes
    const uint8_t* data = nullptr;  ///< into the mapping (nullptr only while building a writer)

    int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
    /// "[2880, 201088]" style shape for messages (ne order).
    std::string shape_string() const;
};

/// One GGUF file, mapped and validated.
class GgufFile {
public:
    /// Opens and validates `path`. Throws nitro::Error on any malformed content.
    explicit GgufFile(const std::string& path);

    const std::string& path() const { return file_.path(); }
    uint32_t version() const { return version_; }
    uint32_t alignment() const { return alignment_; }
    /// File offset of the data section, bytes.
    uint64_t data_offset() const { return data_offset_; }
    /// File size, bytes.
    uint64_t file_size() const { return file_.size(); }
    const GgufMetadata& metadata() const { return meta_; }
    const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
    const uint8_t* mapping() const { return file_.data(); }
    /// How the bytes are held (mapped or copied, locked): core/mapped_file.h.
    const MappedFile& file() const { return file_; }

private:
    MappedFile file_;
    uint32_t version_ = 0;
    uint32_t alignment_ = 32;
    uint64_t data_offset_ = 0;
    GgufMetadata meta_;
    std::vector<GgufTensorInfo> tensors_;
};

/// A model: one GGUF file, or all shards of a split model (`NAME-00001-of-00003.gguf`, keys
/// `split.no`, `split.count`, `split.tensors.count`). Metadata comes from the first shard;
/// tensors from all shards, addressed by name.
class GgufModel {
public:
    /// Opens `path`; if it is the first shard of a split model, opens the others too.
    /// Throws nitro::Error for a missing shard, a non-first shard given directly, shards joined
    /// with `cat`, or tensors duplicated across shards.
    explicit GgufModel(const std::string& path);

    const GgufMetadata& metadata() const { return shards_.front()->metadata(); }
    const std::vector<std::unique_ptr<GgufFile>>& shards() const { return shards_; }
    /// All tensors in file order (shard by shard).
    const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
    /// The tensor named `name`, or nullptr.
    const GgufTensorInfo* find(const std::string& name) const;
    /// The tensor named `name`; throws nitro::Error naming the model file if absent.
    const GgufTensorInfo& get(const std::string& name) const;
    const std::string& path() const { return shards_.front()->path(); }
    /// Sum of all file sizes, bytes.
    uint64_t total_file_bytes() const;

private:
    std::vector<std::unique_ptr<GgufFile>> shards_;
    std::vector<GgufTensorInfo> tensors_;
    std::unordered_map<std::string, size_t> by_name_;
};

/// Dequantizes a whole tensor to f32, row-major in ggml order (ne[0] fastest).
/// Throws nitro::Error if the type cannot be dequantized.
std::vector<float> dequantize_tensor(const GgufTensorInfo& t);

}  // namespace nitro
