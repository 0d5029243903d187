#include "gguf/writer.h"

#include "core/error.h"

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace nitro {

namespace {

template <typename T>
void put(std::vector<uint8_t>& out, T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    out.insert(out.end(), p, p + sizeof(T));
}
void put_string(std::vector<uint8_t>& out, const std::string& s) {
    put<uint64_t>(out, s.size());
    out.insert(out.end(), s.begin(), s.end());
}

void encode_array(std::vector<uint8_t>& out, const GgufArray& a) {
    put<uint32_t>(out, static_cast<uint32_t>(a.type));
    put<uint64_t>(out, a.size());
    std::visit(
        [&](const auto& vec) {
            using V = std::decay_t<decltype(vec)>;
            using E = typename V::value_type;
            for (const auto& e : vec) {
                if constexpr (std::is_same_v<E, std::string>) put_string(out, e);
                else if constexpr (std::is_same_v<E, GgufArray>) encode_array(out, e);
                else if constexpr (std::is_same_v<V, std::vector<bool>>) put<uint8_t>(out, e ? 1 : 0);
                else put<E>(out, e);
            }
        },
        a.data);
}

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

}  // namespace

void gguf_encode_value(std::vector<uint8_t>& out, const GgufValue& v) {
    std::visit(
        [&](const auto& x) {
            using T = std::decay_t<decltype(x)>;
            if constexpr (std::is_same_v<T, std::string>) put_string(out, x);
            else if constexpr (std::is_same_v<T, std::shared_ptr<GgufArray>>) encode_array(out, *x);
            else if constexpr (std::is_same_v<T, bool>) put<uint8_t>(out, x ? 1 : 0);
            else put<T>(out, x);
        },
        v);
}

GgufWriter::GgufWriter(uint32_t alignment) : alignment_(alignment) {
    if (alignment == 0 || (alignment & (alignment - 1)) != 0)
        fail("GGUF alignment {} is not a power of two", alignment);
    if (alignment != 32) meta_.set("general.alignment", alignment);
}

GgufWriter::~GgufWriter() {
    if (f_) {
        std::fclose(f_);
        std::error_code ec;
        std::filesystem::remove(tmp_path_, ec);
    }
}

void GgufWriter::add_tensor(const std::string& name, GgmlType type, std::span<const int64_t> ne) {
    if (f_) fail("GGUF writer: tensor '{}' declared after open()", name);
    if (ne.empty() || ne.size() > kGgufMaxDims)
        fail("GGUF writer: tensor '{}' has {} dimensions (expected 1..{})", name, ne.size(), kGgufMaxDims);
    for (const auto& t : tensors_)
        if (t.name == name) fail("GGUF writer: tensor '{}' declared twice", name);
    GgufTensorInfo t;
    t.name = name;
    t.type = type;
    t.n_dims = static_cast<int>(ne.size());
    for (size_t i = 0; i < ne.size(); ++i) {
        if (ne[i] < 0) fail("GGUF writer: tensor '{}' has negative dimension {}", name, ne[i]);
        t.ne[i] = ne[i];
    }
    t.n_bytes = row_size(type, t.ne[0]) * static_cast<uint64_t>(t.ne[1] * t.ne[2] * t.ne[3]);
    t.offset = data_size_;
    data_size_ = align_up(data_size_ + t.n_bytes, alignment_);
    tensors_.push_back(std::move(t));
}

void GgufWriter::write_raw(const void* p, size_t n) {
    if (n && std::fwrite(p, 1, n, f_) != n) fail("writing '{}' failed: {}", tmp_path_, std::strerror(errno));
    pos_ += n;
}

void GgufWriter::pad_to(uint64_t multiple) {
    static const uint8_t zeros[64] = {};
    uint64_t pad = align_up(pos_, multiple) - pos_;
    while (pad > 0) {
        const size_t k = static_cast<size_t>(std::min<uint64_t>(pad, sizeof(zeros)));
        write_raw(zeros, k);
        pad -= k;
    }
}

void GgufWriter::open(const std::string& path) {
    if (f_) fail("GGUF writer: open() called twice");
    path_ = path;
    tmp_path_ = path + ".tmp";
    // Checked before any byte is written: the rename at the end would fail after the whole model.
    std::error_code dir_ec;
    if (std::filesystem::is_directory(path, dir_ec))
        fail("'{}' is a directory: give the output file's name (e.g. {}/model.gguf)", path,
             path.ends_with('/') ? path.substr(0, path.size() - 1) : path);
    f_ = std::fopen(tmp_path_.c_str(), "wb");
    if (!f_) fail("cannot create '{}': {}", tmp_path_, std::strerror(errno));
    std::vector<uint8_t> h;
    h.reserve(1 << 16);
    put<uint32_t>(h, 0x46554747u);  // "GGUF" little-endian
    put<uint32_t>(h, 3);
    put<uint64_t>(h, tensors_.size());
    put<uint64_t>(h, meta_.entries().size());
    for (const auto& [key, value] : meta_.entries()) {
        put_string(h, key);
        put<uint32_t>(h, static_cast<uint32_t>(gguf_value_type(value)));
        gguf_encode_value(h, value);
    }
    for (const auto& t : tensors_) {
        put_string(h, t.name);
        put<uint32_t>(h, static_cast<uint32_t>(t.n_dims));
        for (int d = 0; d < t.n_dims; ++d) put<uint64_t>(h, static_cast<uint64_t>(t.ne[d]));
        put<uint32_t>(h, static_cast<uint32_t>(t.type));
        put<uint64_t>(h, t.offset);
    }
    write_raw(h.data(), h.size());
    pad_to(alignment_);
    data_start_ = pos_;
    cur_ = 0;
    cur_written_ = 0;
    while (cur_ < tensors_.size() && tensors_[cur_].n_bytes == 0) ++cur_;
}

void GgufWriter::write_data(const void* data, size_t n) {
    if (!f_) fail("GGUF writer: write_data() before open()");
    const auto* p = static_cast<const uint8_t*>(data);
    while (n > 0) {
        if (cur_ >= tensors_.size())
            fail("GGUF writer '{}': {} bytes more than the declared tensors hold", path_, n);
        auto& t = tensors_[cur_];
        const uint64_t k = std::min<uint64_t>(n, t.n_bytes - cur_written_);
        write_raw(p, k);
        p += k;
        n -= k;
        cur_written_ += k;
        if (cur_written_ == t.n_bytes) {
            pad_to(alignment_);
            ++cur_;
            cur_written_ = 0;
            while (cur_ < tensors_.size() && tensors_[cur_].n_bytes == 0) ++cur_;
        }
    }
}

void GgufWriter::finish() {
    if (!f_) fail("GGUF writer: finish() before open()");
    if (cur_ < tensors_.size())
        fail("GGUF writer '{}': tensor '{}' got {} of its {} bytes; every declared tensor must be written",
             path_, tensors_[cur_].name, cur_written_, tensors_[cur_].n_bytes);
    NITRO_CHECK(pos_ == data_start_ + data_size_);
    std::error_code ec;
    if (std::fflush(f_) != 0 || std::fclose(f_) != 0) {
        const int err = errno;
        f_ = nullptr;
        std::filesystem::remove(tmp_path_, ec);
        fail("writing '{}' failed: {}", tmp_path_, std::strerror(err));
    }
    f_ = nullptr;
    std::filesystem::rename(tmp_path_, path_, ec);
    if (ec) {
        std::error_code rm;
        std::filesystem::remove(tmp_path_, rm);  // not left behind under a name the user never gave
        fail("cannot rename '{}' to '{}': {}", tmp_path_, path_, ec.message());
    }
}

}  // namespace nitro
