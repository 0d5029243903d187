// GGUF reader: header parsing and validation (see gguf.h for the format).
#include "core/error.h"
#include "gguf/gguf.h"

#include <algorithm>
#include <cstring>
#include <limits>

namespace nitro {

namespace {

constexpr uint32_t kDefaultAlignment = 32;
constexpr int kMaxArrayDepth = 16;

/// Bounds-checked little-endian reader over the mapped header.
class Cursor {
public:
    Cursor(const std::string& path, const uint8_t* data, uint64_t size)
        : path_(path), data_(data), size_(size) {}

    uint64_t pos() const { return pos_; }
    uint64_t remaining() const { return size_ - pos_; }

    void need(uint64_t n, const char* what) const {
        if (n > remaining())
            fail("'{}' is truncated: reading {} needs {} bytes at offset {}, but the file has {} bytes",
                 path_, what, n, pos_, size_);
    }
    template <typename T>
    T read(const char* what) {
        need(sizeof(T), what);
        T v;
        std::memcpy(&v, data_ + pos_, sizeof(T));
        pos_ += sizeof(T);
        return v;
    }
    std::string read_string(const char* what) {
        const uint64_t n = read<uint64_t>(what);
        need(n, what);
        std::string s(reinterpret_cast<const char*>(data_ + pos_), n);
        pos_ += n;
        return s;
    }

private:
    const std::string& path_;
    const uint8_t* data_;
    uint64_t size_;
    uint64_t pos_ = 0;
};

bool is_valid_value_type(uint32_t t) { return t <= static_cast<uint32_t>(GgufType::FLOAT64); }

/// Smallest encoding of one element of type t, bytes (used to reject absurd counts early).
uint64_t min_element_bytes(GgufType t) {
    switch (t) {
        case GgufType::UINT8: case GgufType::INT8: case GgufType::BOOL: return 1;
        case GgufType::UINT16: case GgufType::INT16: return 2;
        case GgufType::UINT32: case GgufType::INT32: case GgufType::FLOAT32: return 4;
        case GgufType::UINT64: case GgufType::INT64: case GgufType::FLOAT64: return 8;
        case GgufType::STRING: return 8;
        case GgufType::ARRAY: return 12;
    }
    return 1;
}

GgufArray read_array(Cursor& c, const std::string& path, const std::string& key, int depth);

template <typename T>
std::vector<T> read_pod_array(Cursor& c, uint64_t n, const char* what) {
    c.need(n * sizeof(T), what);
    std::vector<T> v(n);
    for (uint64_t i = 0; i < n; ++i) v[i] = c.read<T>(what);
    return v;
}

GgufValue read_value(Cursor& c, GgufType t, const std::string& path, const std::string& key, int depth) {
    switch (t) {
        case GgufType::UINT8: return c.read<uint8_t>("a metadata value");
        case GgufType::INT8: return c.read<int8_t>("a metadata value");
        case GgufType::UINT16: return c.read<uint16_t>("a metadata value");
        case GgufType::INT16: return c.read<int16_t>("a metadata value");
        case GgufType::UINT32: return c.read<uint32_t>("a metadata value");
        case GgufType::INT32: return c.read<int32_t>("a metadata value");
        case GgufType::FLOAT32: return c.read<float>("a metadata value");
        case GgufType::UINT64: return c.read<uint64_t>("a metadata value");
        case GgufType::INT64: return c.read<int64_t>("a metadata value");
        case GgufType::FLOAT64: return c.read<double>("a metadata value");
        case GgufType::BOOL: {
            const uint8_t b = c.read<uint8_t>("a metadata value");
            if (b > 1) fail("'{}': metadata key '{}' is a bool with byte value {} (expected 0 or 1)", path, key, b);
            return b != 0;
        }
        case GgufType::STRING: return c.read_string("a metadata string");
        case GgufType::ARRAY:
            return std::make_shared<GgufArray>(read_array(c, path, key, depth + 1));
    }
    fail("'{}': metadata key '{}' has unknown value type {}", path, key, static_cast<uint32_t>(t));
}

GgufArray read_array(Cursor& c, const std::string& path, const std::string& key, int depth) {
    if (depth > kMaxArrayDepth)
        fail("'{}': metadata key '{}' nests arrays deeper than {} levels", path, key, kMaxArrayDepth);
    const uint64_t at = c.pos();
    const uint32_t raw = c.read<uint32_t>("an array element type");
    if (!is_valid_value_type(raw))
        fail("'{}': metadata key '{}' is an array of unknown value type {} (offset {}; expected 0..12)",
             path, key, raw, at);
    const GgufType et = static_cast<GgufType>(raw);
    const uint64_t n = c.read<uint64_t>("an array length");
    if (n > c.remaining() / min_element_bytes(et))
        fail("'{}' is truncated or corrupt: metadata key '{}' declares {} array elements of type {} "
             "but only {} bytes remain",
             path, key, n, gguf_type_name(et), c.remaining());
    GgufArray a;
    a.type = et;
    switch (et) {
        case GgufType::UINT8: a.data = read_pod_array<uint8_t>(c, n, "an array"); break;
        case GgufType::INT8: a.data = read_pod_array<int8_t>(c, n, "an array"); break;
        case GgufType::UINT16: a.data = read_pod_array<uint16_t>(c, n, "an array"); break;
        case GgufType::INT16: a.data = read_pod_array<int16_t>(c, n, "an array"); break;
        case GgufType::UINT32: a.data = read_pod_array<uint32_t>(c, n, "an array"); break;
        case GgufType::INT32: a.data = read_pod_array<int32_t>(c, n, "an array"); break;
        case GgufType::FLOAT32: a.data = read_pod_array<float>(c, n, "an array"); break;
        case GgufType::UINT64: a.data = read_pod_array<uint64_t>(c, n, "an array"); break;
        case GgufType::INT64: a.data = read_pod_array<int64_t>(c, n, "an array"); break;
        case GgufType::FLOAT64: a.data = read_pod_array<double>(c, n, "an array"); break;
        case GgufType::BOOL: {
            std::vector<bool> v(n);
            for (uint64_t i = 0; i < n; ++i) {
                const uint8_t b = c.read<uint8_t>("a bool array");
                if (b > 1) fail("'{}': metadata key '{}' element {} is a bool with byte value {}", path, key, i, b);
                v[i] = b != 0;
            }
            a.data = std::move(v);
            break;
        }
        case GgufType::STRING: {
            std::vector<std::string> v;
            v.reserve(n);
            for (uint64_t i = 0; i < n; ++i) v.push_back(c.read_string("a string array"));
            a.data = std::move(v);
            break;
        }
        case GgufType::ARRAY: {
            std::vector<GgufArray> v;
            v.reserve(n);
            for (uint64_t i = 0; i < n; ++i) v.push_back(read_array(c, path, key, depth + 1));
            a.data = std::move(v);
            break;
        }
    }
    return a;
}

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

}  // namespace

GgufFile::GgufFile(const std::string& path) : file_(path, model_map_options()) {
    meta_.source = path;
    Cursor c(path, file_.data(), file_.size());
    if (file_.size() < 4 || std::memcmp(file_.data(), "GGUF", 4) != 0) {
        std::string got;
        for (size_t i = 0; i < std::min<size_t>(4, file_.size()); ++i)
            got += fmt::format("{:02x}", file_.data()[i]);
        fail("'{}' is not a GGUF file: bad magic (expected 'GGUF' = 47475546, found {})", path,
             got.empty() ? "an empty file" : got);
    }
    c.read<uint32_t>("the magic");
    version_ = c.read<uint32_t>("the version");
    if (version_ == 1) fail("'{}' is GGUF version 1, which is not supported (re-convert it; versions 2 and 3 are read)", path);
    if (version_ != 2 && version_ != 3)
        fail("'{}' has unsupported GGUF version {} (expected 2 or 3); is the file big-endian or corrupt?", path, version_);
    const uint64_t n_tensors = c.read<uint64_t>("the tensor count");
    const uint64_t n_kv = c.read<uint64_t>("the metadata count");
    // Each key/value pair takes at least 8 (key length) + 4 (type) + 1 bytes, each tensor info at
    // least 8 + 4 + 8 + 4 + 8 bytes: reject counts that cannot fit before allocating anything.
    if (n_kv > c.remaining() / 13)
        fail("'{}' is truncated or corrupt: it declares {} metadata entries but has {} bytes left", path, n_kv, c.remaining());
    if (n_tensors > c.remaining() / 32)
        fail("'{}' is truncated or corrupt: it declares {} tensors but has {} bytes left", path, n_tensors, c.remaining());

    for (uint64_t i = 0; i < n_kv; ++i) {
        std::string key = c.read_string("a metadata key");
        if (meta_.has(key)) fail("'{}': metadata key '{}' appears twice", path, key);
        const uint64_t at = c.pos();
        const uint32_t raw = c.read<uint32_t>("a metadata value type");
        if (!is_valid_value_type(raw))
            fail("'{}': metadata key '{}' has unknown value type {} at offset {} (expected 0..12)", path, key, raw, at);
        GgufValue v = read_value(c, static_cast<GgufType>(raw), path, key, 0);
        meta_.set(key, std::move(v));
    }

    if (const GgufValue* a = meta_.find("general.alignment")) {
        const uint32_t* al = std::get_if<uint32_t>(a);
        if (!al) fail("'{}': general.alignment is {}, expected uint32", path, gguf_type_name(gguf_value_type(*a)));
        if (*al == 0 || (*al & (*al - 1)) != 0)
            fail("'{}': general.alignment = {} is not a power of two", path, *al);
        alignment_ = *al;
    } else {
        alignment_ = kDefaultAlignment;
    }

    tensors_.reserve(n_tensors);
    std::unordered_map<std::string, size_t> seen;
    for (uint64_t i = 0; i < n_tensors; ++i) {
        GgufTensorInfo t;
        t.name = c.read_string("a tensor name");
        const uint32_t n_dims = c.read<uint32_t>("a tensor's dimension count");
        if (n_dims < 1 || n_dims > kGgufMaxDims)
            fail("'{}': tensor '{}' has {} dimensions (expected 1..{})", path, t.name, n_dims, kGgufMaxDims);
        t.n_dims = static_cast<int>(n_dims);
        for (uint32_t d = 0; d < n_dims; ++d) {
            const uint64_t ne = c.read<uint64_t>("a tensor dimension");
            if (ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
                fail("'{}': tensor '{}' dimension {} = {} is out of range", path, t.name, d, ne);
            t.ne[d] = static_cast<int64_t>(ne);
        }
        const uint32_t type_id = c.read<uint32_t>("a tensor type");
        t.offset = c.read<uint64_t>("a tensor offset");
        if (seen.count(t.name)) fail("'{}': tensor '{}' appears twice", path, t.name);
        const TypeTraits* tt = type_traits(type_id);
        if (!tt)
            fail("'{}': tensor '{}' has unknown ggml type id {} (this build knows ids 0..39 except "
                 "retired ones; is the file newer than nitro?)",
                 path, t.name, type_id);
        t.type = tt->type;
        // Element and byte counts must fit 64 bits.
        int64_t n_el = 1, rows_i = 1;
        bool overflow = false;
        for (int d = 0; d < kGgufMaxDims; ++d) overflow |= __builtin_mul_overflow(n_el, t.ne[d], &n_el);
        for (int d = 1; d < kGgufMaxDims; ++d) overflow |= __builtin_mul_overflow(rows_i, t.ne[d], &rows_i);
        if (t.ne[0] % tt->block_size != 0)
            fail("'{}': tensor '{}' of type {} has rows of {} values, not a multiple of the block size {}",
                 path, t.name, type_display_name(t.type), t.ne[0], tt->block_size);
        uint64_t row_bytes = 0;
        overflow |= __builtin_mul_overflow(static_cast<uint64_t>(t.ne[0] / tt->block_size),
                                           static_cast<uint64_t>(tt->type_size), &row_bytes);
        const uint64_t rows = static_cast<uint64_t>(rows_i);
        uint64_t n_bytes = 0;
        overflow |= __builtin_mul_overflow(row_bytes, rows, &n_bytes);
        if (overflow)
            fail("'{}': tensor '{}' shape {} overflows 64-bit element or byte counts", path, t.name, t.shape_string());
        t.n_bytes = n_bytes;
        if (t.offset % alignment_ != 0)
            fail("'{}': tensor '{}' data offset {} is not a multiple of the alignment {}", path, t.name, t.offset, alignment_);
        seen.emplace(t.name, tensors_.size());
        tensors_.push_back(std::move(t));
    }

    data_offset_ = align_up(c.pos(), alignment_);
    const uint64_t file_size = file_.size();
    if (!tensors_.empty() && data_offset_ > file_size)
        fail("'{}' is truncated: the data section should start at offset {} but the file has {} bytes", path, data_offset_, file_size);
    const uint64_t data_size = file_size >= data_offset_ ? file_size - data_offset_ : 0;
    for (auto& t : tensors_) {
        if (t.offset > data_size || t.n_bytes > data_size - t.offset)
            fail("'{}': tensor '{}' ({}, {}, {} bytes at data offset {}) extends past the end of the file "
                 "(data section is {} bytes): the file is truncated or the offset is wrong",
                 path, t.name, type_display_name(t.type), t.shape_string(), t.n_bytes, t.offset, data_size);
        t.data = file_.data() + data_offset_ + t.offset;
    }
    // Overlap check: in offset order, each tensor must end before the next one begins.
    std::vector<const GgufTensorInfo*> order;
    for (auto& t : tensors_) order.push_back(&t);
    std::sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
    for (size_t i = 1; i < order.size(); ++i) {
        const auto* a = order[i - 1];
        const auto* b = order[i];
        if (a->n_bytes > 0 && b->n_bytes > 0 && a->offset + a->n_bytes > b->offset)
            fail("'{}': tensors '{}' (bytes {}..{}) and '{}' (from byte {}) overlap in the data section",
                 path, a->name, a->offset, a->offset + a->n_bytes, b->name, b->offset);
    }
}

std::vector<float> dequantize_tensor(const GgufTensorInfo& t) {
    std::vector<float> out(static_cast<size_t>(t.n_elements()));
    if (!out.empty()) dequantize(t.type, t.data, out.data(), t.n_elements());
    return out;
}

}  // namespace nitro
