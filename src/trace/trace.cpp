#include "trace/trace.h"

#include "core/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace nitro {

const char* trace_phase_name(TracePhase p) {
    switch (p) {
        case TracePhase::Prefill: return "prefill";
        case TracePhase::Decode: return "decode";
    }
    return "?";
}

uint64_t TraceHeader::bytes_per_expert() const {
    uint64_t m = 0;
    for (uint64_t b : bytes_per_expert_per_layer) m = std::max(m, b);
    return m;
}

void TraceHeader::validate(const std::string& where) const {
    if (n_layer < 1 || n_layer > 65535) fail("{}: n_layer {} is out of range (expected 1..65535)", where, n_layer);
    if (n_expert < 1 || n_expert >= kNoExpert)
        fail("{}: n_expert {} is out of range (expected 1..{})", where, n_expert, kNoExpert - 1);
    if (n_expert_used < 1 || n_expert_used > n_expert || n_expert_used > 255)
        fail("{}: n_expert_used {} is out of range (expected 1..min(n_expert {}, 255))", where, n_expert_used,
             n_expert);
    if (!bytes_per_expert_per_layer.empty() && bytes_per_expert_per_layer.size() != n_layer)
        fail("{}: {} per-layer expert sizes for {} layers", where, bytes_per_expert_per_layer.size(), n_layer);
    if (!layer_n_expert.empty()) {
        if (layer_n_expert.size() != n_layer)
            fail("{}: {} per-layer expert counts for {} layers", where, layer_n_expert.size(), n_layer);
        bool any = false;
        for (uint32_t l = 0; l < n_layer; ++l) {
            if (layer_n_expert[l] != 0 && (layer_n_expert[l] > n_expert || layer_n_expert[l] < n_expert_used))
                fail("{}: layer {} has {} experts (expected 0, a layer without routed experts, or {}..{})", where, l,
                     layer_n_expert[l], n_expert_used, n_expert);
            any |= layer_n_expert[l] != 0;
        }
        if (!any) fail("{}: no layer has routed experts", where);
    }
}

std::string validate_record(const TraceHeader& h, const TraceRecordIn& r) {
    if (r.layer >= h.n_layer) return fmt::format("layer {} >= n_layer {}", r.layer, h.n_layer);
    const uint32_t n_expert = h.experts_of(r.layer);
    if (n_expert == 0) return fmt::format("layer {} has no routed experts", r.layer);
    if (r.phase != TracePhase::Prefill && r.phase != TracePhase::Decode)
        return fmt::format("phase {} is neither 0 (prefill) nor 1 (decode)", static_cast<int>(r.phase));
    if (r.ids.size() != h.n_expert_used)
        return fmt::format("{} expert ids, expected n_expert_used = {}", r.ids.size(), h.n_expert_used);
    for (size_t i = 0; i < r.ids.size(); ++i) {
        if (r.ids[i] >= n_expert) return fmt::format("expert id {} >= n_expert {}", r.ids[i], n_expert);
        for (size_t j = 0; j < i; ++j)
            if (r.ids[j] == r.ids[i]) return fmt::format("expert id {} appears twice", r.ids[i]);
    }
    if (h.has_weights) {
        if (r.weights.size() != h.n_expert_used)
            return fmt::format("{} weights, expected n_expert_used = {}", r.weights.size(), h.n_expert_used);
        for (float w : r.weights)
            if (!std::isfinite(w) || w < 0) return fmt::format("weight {} is not a finite number >= 0", w);
    } else if (!r.weights.empty()) {
        return "weights given but the trace header says it has none";
    }
    return {};
}

std::string PositionOrder::check(uint32_t seq, uint32_t layer, uint32_t pos) {
    if (layer >= n_layer_) return fmt::format("layer {} >= n_layer {}", layer, n_layer_);
    auto [it, inserted] = last_.try_emplace(seq);
    if (inserted) it->second.assign(n_layer_, -1);
    int64_t& last = it->second[layer];
    if (static_cast<int64_t>(pos) <= last)
        return fmt::format("position {} of sequence {} at layer {} does not increase (previous {})", pos, seq,
                           layer, last);
    last = pos;
    return {};
}

void Trace::append(const TraceRecordIn& r) {
    if (order_records_ != size() || size() == 0) {  // first record, or columns filled directly
        order_ = PositionOrder(header.n_layer);
        for (size_t i = 0; i < size(); ++i) {
            const std::string w = order_.check(seq[i], layer[i], pos[i]);
            if (!w.empty()) fail("record {}: {}", i, w);
        }
        order_records_ = size();
    }
    std::string why = validate_record(header, r);
    if (why.empty()) why = order_.check(r.seq, r.layer, r.pos);
    if (!why.empty()) fail("record {}: {}", size(), why);
    seq.push_back(r.seq);
    pos.push_back(r.pos);
    phase.push_back(r.phase);
    layer.push_back(static_cast<uint16_t>(r.layer));
    ids.insert(ids.end(), r.ids.begin(), r.ids.end());
    weights.insert(weights.end(), r.weights.begin(), r.weights.end());
    ++order_records_;
}

void Trace::validate_all() const {
    const size_t k = header.n_expert_used;
    if (ids.size() != size() * k || pos.size() != size() || phase.size() != size() || layer.size() != size() ||
        (!weights.empty() && weights.size() != size() * k) || (header.has_weights && weights.size() != size() * k))
        fail("trace: columns have inconsistent lengths for {} records", size());
    PositionOrder order(header.n_layer);
    for (size_t i = 0; i < size(); ++i) {
        const TraceRecordIn r = record(i);
        std::string why = validate_record(header, r);
        if (why.empty()) why = order.check(r.seq, r.layer, r.pos);
        if (!why.empty()) fail("record {}: {}", i, why);
    }
}

std::vector<uint32_t> Trace::step_index(size_t* n_steps) const {
    std::vector<uint32_t> out(size());
    std::unordered_map<uint64_t, uint32_t> index;
    uint32_t next = 0;
    uint64_t last_key = ~0ull;
    uint32_t last_step = 0;
    for (size_t i = 0; i < size(); ++i) {
        const uint64_t key = (static_cast<uint64_t>(seq[i]) << 32) | pos[i];
        if (key != last_key) {
            auto [it, inserted] = index.try_emplace(key, next);
            if (inserted) ++next;
            last_key = key;
            last_step = it->second;
        }
        out[i] = last_step;
    }
    if (n_steps) *n_steps = next;
    return out;
}

}  // namespace nitro
