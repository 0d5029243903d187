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
    h ^= h >> 32;  // multiplication only carries upwards: fold the high bits into the low ones
    h *= 0xd6e8feb86659fd93ull;
    return h ^ (h >> 32);
}

/// Maps byte strings (views into storage owned elsewhere) to non-negative int32 values.
/// Each slot keeps the first 8 key bytes inline, so most lookups (tokens are short) touch one
/// cache line; prefetch() lets a caller overlap the misses of a batch of lookups.
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
        const uint64_t head = head_of(key);
        size_t i = hash_bytes(key) & mask_;
        while (slots_[i].value >= 0) {
            if (equal(slots_[i], key, head)) return false;
            i = (i + 1) & mask_;
        }
        slots_[i] = Slot{head, key.data(), static_cast<uint32_t>(key.size()), value};
        return true;
    }
    /// The value for `key`, or -1.
    int32_t find(std::string_view key) const { return find_hashed(key, hash_bytes(key)); }
    /// find() with the hash already computed (hash_bytes(key)).
    int32_t find_hashed(std::string_view key, uint64_t hash) const {
        if (slots_.empty()) return -1;
        const uint64_t head = head_of(key);
        size_t i = hash & mask_;
        while (slots_[i].value >= 0) {
            if (equal(slots_[i], key, head)) return slots_[i].value;
            i = (i + 1) & mask_;
        }
        return -1;
    }
    /// Hints the CPU to load the slot a key with this hash starts probing at.
    void prefetch(uint64_t hash) const {
        if (!slots_.empty()) __builtin_prefetch(&slots_[hash & mask_]);
    }

private:
    struct Slot {
        uint64_t head = 0;  // the first (up to) 8 key bytes, zero padded
        const char* data = nullptr;
        uint32_t len = 0;
        int32_t value = -1;
    };
    static uint64_t head_of(std::string_view k) {
        uint64_t h = 0;
        std::memcpy(&h, k.data(), k.size() < 8 ? k.size() : 8);
        return h;
    }
    static bool equal(const Slot& s, std::string_view k, uint64_t head) {
        return s.len == k.size() && s.head == head &&
               (k.size() <= 8 || std::memcmp(s.data + 8, k.data() + 8, k.size() - 8) == 0);
    }
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
    /// Hints the CPU to load the slot where (left, right) starts probing.
    void prefetch(int32_t left, int32_t right) const {
        __builtin_prefetch(&slots_[mix(key(left, right)) & mask_]);
    }

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
