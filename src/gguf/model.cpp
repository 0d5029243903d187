// GgufModel: one file or the shards of a split model (llama.cpp's gguf-split naming and keys:
// "%s-%05d-of-%05d.gguf", split.no (u16, 0-based), split.count (u16), split.tensors.count (i32)).
#include "core/error.h"
#include "gguf/gguf.h"

#include <cstring>
#include <filesystem>
#include <regex>

namespace nitro {

namespace {

/// Looks for another GGUF header right after the last tensor's data: the signature of shards
/// concatenated with `cat`.
bool has_trailing_gguf(const GgufFile& f) {
    uint64_t end = f.data_offset();
    for (const auto& t : f.tensors()) end = std::max(end, f.data_offset() + t.offset + t.n_bytes);
    for (uint64_t at : {end, (end + f.alignment() - 1) / f.alignment() * f.alignment()}) {
        if (at + 4 <= f.file_size() && std::memcmp(f.mapping() + at, "GGUF", 4) == 0) return true;
    }
    return false;
}

}  // namespace

GgufModel::GgufModel(const std::string& path) {
    shards_.push_back(std::make_unique<GgufFile>(path));
    const GgufMetadata& m0 = shards_[0]->metadata();
    const int64_t count = m0.get_int("split.count").value_or(1);
    const int64_t no = m0.get_int("split.no").value_or(0);

    if (has_trailing_gguf(*shards_[0]))
        fail("'{}' has another GGUF header after its last tensor: it looks like split shards joined "
             "with `cat`, which does not make a valid GGUF. Keep the shards as separate files and "
             "pass the first one (NAME-00001-of-0000N.gguf), or merge them with llama-gguf-split --merge",
             path);
    if (count < 1 || count > 99999) fail("'{}': split.count = {} is out of range", path, count);
    if (no < 0 || no >= count) fail("'{}': split.no = {} is out of range for split.count = {}", path, no, count);

    if (count > 1) {
        namespace fs = std::filesystem;
        const fs::path p(path);
        static const std::regex shard_re(R"(^(.*)-(\d{5})-of-(\d{5})\.gguf$)");
        std::smatch m;
        const std::string fname = p.filename().string();
        if (no != 0) {
            std::string first = std::regex_match(fname, m, shard_re)
                                    ? (p.parent_path() / fmt::format("{}-00001-of-{:05d}.gguf", m[1].str(), count)).string()
                                    : std::string("the file with split.no = 0");
            fail("'{}' is shard {} of {} of a split model; open the first shard ('{}') instead", path,
                 no + 1, count, first);
        }
        if (!std::regex_match(fname, m, shard_re) || std::stoll(m[3].str()) != count)
            fail("'{}' is the first shard of a {}-file split model, but its name does not follow "
                 "NAME-00001-of-{:05d}.gguf, so the other shards cannot be found",
                 path, count, count);
        for (int64_t i = 2; i <= count; ++i) {
            const fs::path sp = p.parent_path() / fmt::format("{}-{:05d}-of-{:05d}.gguf", m[1].str(), i, count);
            if (!fs::exists(sp))
                fail("split model '{}' needs shard {} of {} ('{}'), which does not exist", path, i, count, sp.string());
            auto shard = std::make_unique<GgufFile>(sp.string());
            const auto& ms = shard->metadata();
            if (ms.get_int("split.count").value_or(1) != count || ms.get_int("split.no").value_or(-1) != i - 1)
                fail("'{}' should be shard {} of {} but says split.no = {}, split.count = {}", sp.string(), i,
                     count, ms.get_int("split.no").value_or(-1), ms.get_int("split.count").value_or(1));
            if (has_trailing_gguf(*shard))
                fail("'{}' has another GGUF header after its last tensor (shards joined with `cat`?)", sp.string());
            shards_.push_back(std::move(shard));
        }
    }

    for (size_t s = 0; s < shards_.size(); ++s) {
        for (GgufTensorInfo t : shards_[s]->tensors()) {
            t.shard = static_cast<int>(s);
            if (by_name_.count(t.name))
                fail("split model '{}': tensor '{}' appears in shard {} and shard {}", path, t.name,
                     tensors_[by_name_[t.name]].shard + 1, s + 1);
            by_name_.emplace(t.name, tensors_.size());
            tensors_.push_back(std::move(t));
        }
    }
    if (auto declared = m0.get_int("split.tensors.count"); declared && count > 1 &&
                                                          *declared != static_cast<int64_t>(tensors_.size()))
        fail("split model '{}' declares split.tensors.count = {} but its {} shards hold {} tensors", path,
             *declared, count, tensors_.size());
}

const GgufTensorInfo* GgufModel::find(const std::string& name) const {
    auto it = by_name_.find(name);
    return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

const GgufTensorInfo& GgufModel::get(const std::string& name) const {
    const GgufTensorInfo* t = find(name);
    if (!t) fail("'{}' has no tensor named '{}'", path(), name);
    return *t;
}

uint64_t GgufModel::total_file_bytes() const {
    uint64_t n = 0;
    for (const auto& s : shards_) n += s->file_size();
    return n;
}

}  // namespace nitro
