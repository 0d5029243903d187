#include "core/error.h"
#include "gguf/gguf.h"

#include <limits>

namespace nitro {

const char* gguf_type_name(GgufType t) {
    switch (t) {
        case GgufType::UINT8: return "uint8";
        case GgufType::INT8: return "int8";
        case GgufType::UINT16: return "uint16";
        case GgufType::INT16: return "int16";
        case GgufType::UINT32: return "uint32";
        case GgufType::INT32: return "int32";
        case GgufType::FLOAT32: return "float32";
        case GgufType::BOOL: return "bool";
        case GgufType::STRING: return "string";
        case GgufType::ARRAY: return "array";
        case GgufType::UINT64: return "uint64";
        case GgufType::INT64: return "int64";
        case GgufType::FLOAT64: return "float64";
    }
    return "unknown";
}

size_t GgufArray::size() const {
    return std::visit([](const auto& v) { return v.size(); }, data);
}

GgufType gguf_value_type(const GgufValue& v) {
    // The variant's alternatives are declared in GgufType order except the array, which sits at
    // index 9 exactly like GGUF_TYPE_ARRAY, so the index is the type id.
    return static_cast<GgufType>(v.index());
}

void GgufMetadata::set(const std::string& key, GgufValue value) {
    auto it = index_.find(key);
    if (it != index_.end()) {
        entries_[it->second].second = std::move(value);
        return;
    }
    index_.emplace(key, entries_.size());
    entries_.emplace_back(key, std::move(value));
}

const GgufValue* GgufMetadata::find(const std::string& key) const {
    auto it = index_.find(key);
    return it == index_.end() ? nullptr : &entries_[it->second].second;
}

namespace {

[[noreturn]] void wrong_type(const GgufMetadata& m, const std::string& key, const char* expected,
                             const GgufValue& v) {
    fail("{}: metadata key '{}' is {}, expected {}", m.source, key,
         gguf_type_name(gguf_value_type(v)), expected);
}

}  // namespace

std::optional<std::string> GgufMetadata::get_string(const std::string& key) const {
    const GgufValue* v = find(key);
    if (!v) return std::nullopt;
    if (auto* s = std::get_if<std::string>(v)) return *s;
    wrong_type(*this, key, "a string", *v);
}

std::optional<int64_t> GgufMetadata::get_int(const std::string& key) const {
    const GgufValue* v = find(key);
    if (!v) return std::nullopt;
    if (auto* u = std::get_if<uint64_t>(v)) {
        if (*u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
            fail("{}: metadata key '{}' = {} does not fit a signed 64-bit integer", source, key, *u);
        return static_cast<int64_t>(*u);
    }
    std::optional<int64_t> r;
    std::visit(
        [&](const auto& x) {
            using T = std::decay_t<decltype(x)>;
            if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) r = static_cast<int64_t>(x);
        },
        *v);
    if (!r) wrong_type(*this, key, "an integer", *v);
    return r;
}

std::optional<uint64_t> GgufMetadata::get_uint(const std::string& key) const {
    const GgufValue* v = find(key);
    if (!v) return std::nullopt;
    if (auto* u = std::get_if<uint64_t>(v)) return *u;
    auto i = get_int(key);
    if (*i < 0) fail("{}: metadata key '{}' = {} must not be negative", source, key, *i);
    return static_cast<uint64_t>(*i);
}

std::optional<double> GgufMetadata::get_float(const std::string& key) const {
    const GgufValue* v = find(key);
    if (!v) return std::nullopt;
    if (auto* f = std::get_if<float>(v)) return *f;
    if (auto* d = std::get_if<double>(v)) return *d;
    // llama.cpp writers sometimes store a float hparam as an integer; accept it.
    if (gguf_value_type(*v) != GgufType::BOOL && gguf_value_type(*v) != GgufType::STRING &&
        gguf_value_type(*v) != GgufType::ARRAY)
        return static_cast<double>(*get_int(key));
    wrong_type(*this, key, "a number", *v);
}

std::optional<bool> GgufMetadata::get_bool(const std::string& key) const {
    const GgufValue* v = find(key);
    if (!v) return std::nullopt;
    if (auto* b = std::get_if<bool>(v)) return *b;
    wrong_type(*this, key, "a bool", *v);
}

const GgufArray* GgufMetadata::get_array(const std::string& key) const {
    const GgufValue* v = find(key);
    if (!v) return nullptr;
    if (auto* a = std::get_if<std::shared_ptr<GgufArray>>(v)) return a->get();
    wrong_type(*this, key, "an array", *v);
}

std::string GgufTensorInfo::shape_string() const {
    std::string s = "[";
    for (int i = 0; i < n_dims; ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
    return s + "]";
}

}  // namespace nitro
