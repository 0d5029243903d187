// Open-addressing hash tables for the tokenizer's two hot lookups, built once at load:
//   - byte string -> token id (201k entries for gpt-oss), keys pointing into one arena;
//   - (left id, right id) -> (merge rank, merged id) (446k merges for gpt-oss).
// Linear probing, power-of-two capacity at most half full, no deletion. std::unordered_map
// spends most of the load time allocating nodes; these tables allocate twice in total.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

namespace nitro {

/// 64-bit hash of a short byte string (FNV-1a over 8-byte words, then a final mix).
inline uint64_t hash_bytes(std::string_view s) {
    uint64_t h = 0xcbf29ce484222325ull ^ s.size();
    size_t i = 0;
    for (; i + 8 <= s.size(); i += 8) {
        uint64_t w;
        std::memcpy(&w, s.data() + i, 8);
        h = (h ^ w) * 0x100000001b3ull;
        h ^= h >> 29;
    }
    uint64_t tail = 0;
    std::memcpy(&tail, s.data() + i, s.size() - i);
    h = (h ^ tail) * 0x9e3779b97f4a7c15ull;
    return h ^ (h >> 32);
}

/// Maps byte strings (views into storage owned elsewhere) to non-negative int32 values.
class StringIdMap {
public:
    /// Sizes the table for `n` entries (call before inserting).
    void reserve(size_t n) {
        size_t cap = 16;
        while (cap < 2 * n) cap <<= 1;
        slots_.assign(cap, Slot{});
        mask_ = cap - 1;
    }
    /// Inserts `key` -> `value` unless `key` is present; returns false if it was present.
    bool insert(std::string_view key, int32_t value) {
        size_t i = hash_bytes(key) & mask_;
        while (slots_[i].value >= 0) {
            if (view(slots_[i]) == key) return false;
            i = (i + 1) & mask_;
        }
        slots_[i] = Slot{key.data(), static_cast<uint32_t>(key.size()), value};
        return true;
    }
    /// The value for `key`, or -1.
    int32_t find(std::string_view key) const {
        if (slots_.empty()) return -1;
        size_t i = hash_bytes(key) & mask_;
        while (slots_[i].value >= 0) {
            if (slots_[i].len == key.size() && std::memcmp(slots_[i].data, key.data(), key.size()) == 0)
                return slots_[i].value;
            i = (i + 1) & mask_;
        }
        return -1;
    }

private:
    struct Slot {
        const char* data = nullptr;
        uint32_t len = 0;
        int32_t value = -1;
    };
    static std::string_view view(const Slot& s) { return {s.data, s.len}; }
    std::vector<Slot> slots_;
    size_t mask_ = 0;
};

/// A BPE merge: the rank (lower merges first) and the id of the merged token.
struct BpeMerge {
    int32_t rank = -1;
    int32_t id = -1;
};

/// Maps a pair of token ids to the merge that joins them.
class MergeMap {
public:
    /// Sizes the table for `n` entries (call before inserting).
    void reserve(size_t n) {
        size_t cap = 16;
        while (cap < 2 * n) cap <<= 1;
        slots_.assign(cap, Slot{});
        mask_ = cap - 1;
    }
    /// Inserts unless the pair is present (the first, lowest-ranked merge wins, as in HF).
    void insert(int32_t left, int32_t right, BpeMerge m) {
        const uint64_t k = key(left, right);
        size_t i = mix(k) & mask_;
        while (slots_[i].merge.rank >= 0) {
            if (slots_[i].key == k) return;
            i = (i + 1) & mask_;
        }
        slots_[i] = Slot{k, m};
    }
    /// The merge of (left, right); rank -1 if none.
    BpeMerge find(int32_t left, int32_t right) const {
        const uint64_t k = key(left, right);
        size_t i = mix(k) & mask_;
        while (slots_[i].merge.rank >= 0) {
            if (slots_[i].key == k) return slots_[i].merge;
            i = (i + 1) & mask_;
        }
        return {};
    }
    size_t size_hint() const { return slots_.size(); }

private:
    struct Slot {
        uint64_t key = 0;
        BpeMerge merge;
    };
    static uint64_t key(int32_t a, int32_t b) {
        return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
    }
    static uint64_t mix(uint64_t k) {
        k ^= k >> 33;
        k *= 0xff51afd7ed558ccdull;
        k ^= k >> 33;
        return k;
    }
    std::vector<Slot> slots_;
    size_t mask_ = 0;
};

}  // namespace nitro
