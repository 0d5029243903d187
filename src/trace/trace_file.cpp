#include "trace/trace_file.h"

#include "core/error.h"
#include "core/mapped_file.h"
#include "core/user_file.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <cerrno>
#include <cstring>

namespace nitro {

namespace {

constexpr char kMagicHeader[4] = {'N', 'M', 'T', 'R'};
constexpr char kMagicChunk[4] = {'N', 'M', 'C', 'K'};
constexpr char kMagicEnd[4] = {'N', 'M', 'E', 'N'};
constexpr size_t kChunkHeaderBytes = 16;
constexpr size_t kEndBytes = 24;

// Little-endian encoding, independent of the host.
void put_le(std::vector<uint8_t>& out, uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
uint64_t get_le(const uint8_t* p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
    return v;
}
void put_f32(std::vector<uint8_t>& out, float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    put_le(out, u, 4);
}
float get_f32(const uint8_t* p) {
    const uint32_t u = static_cast<uint32_t>(get_le(p, 4));
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

std::vector<uint8_t> encode_header(const TraceHeader& h) {
    std::vector<uint8_t> b(kMagicHeader, kMagicHeader + 4);
    const uint32_t header_size = static_cast<uint32_t>(40 + h.model_name.size() + 12 * h.n_layer + 8);
    put_le(b, kTraceVersion, 4);
    put_le(b, header_size, 4);
    put_le(b, h.n_layer, 4);
    put_le(b, h.n_expert, 4);
    put_le(b, h.n_expert_used, 4);
    put_le(b, h.has_weights ? 1 : 0, 4);
    put_le(b, h.model_name.size(), 4);
    put_le(b, h.model_hash, 8);
    b.insert(b.end(), h.model_name.begin(), h.model_name.end());
    for (uint32_t l = 0; l < h.n_layer; ++l) put_le(b, h.expert_bytes(l), 8);
    for (uint32_t l = 0; l < h.n_layer; ++l) put_le(b, h.experts_of(l), 4);
    put_le(b, XXH3_64bits(b.data(), b.size()), 8);
    NITRO_CHECK(b.size() == header_size);
    return b;
}

void encode_record(std::vector<uint8_t>& out, const TraceRecordIn& r) {
    put_le(out, r.seq, 4);
    put_le(out, r.pos, 4);
    put_le(out, r.layer, 2);
    put_le(out, static_cast<uint8_t>(r.phase), 1);
    put_le(out, r.ids.size(), 1);
    for (ExpertId e : r.ids) put_le(out, e, 2);
    for (float w : r.weights) put_f32(out, w);
}

// Decodes record bytes into views over `ids` / `w` scratch of size k.
TraceRecordIn decode_record(const TraceHeader& h, const uint8_t* p, std::vector<ExpertId>& ids,
                            std::vector<float>& w) {
    TraceRecordIn r;
    r.seq = static_cast<uint32_t>(get_le(p, 4));
    r.pos = static_cast<uint32_t>(get_le(p + 4, 4));
    r.layer = static_cast<uint32_t>(get_le(p + 8, 2));
    r.phase = static_cast<TracePhase>(p[10]);
    const uint32_t n_used = p[11];
    const uint32_t k = h.n_expert_used;
    // The record has room for k ids; a count byte that disagrees is reported by validate_record.
    ids.resize(n_used == k ? k : n_used);
    for (uint32_t i = 0; i < std::min(n_used, k); ++i) ids[i] = static_cast<ExpertId>(get_le(p + 12 + 2 * i, 2));
    r.ids = ids;
    if (h.has_weights) {
        w.resize(k);
        for (uint32_t i = 0; i < k; ++i) w[i] = get_f32(p + 12 + 2 * k + 4 * i);
        r.weights = w;
    }
    return r;
}

}  // namespace

size_t trace_record_bytes(const TraceHeader& h) {
    return 12 + 2 * static_cast<size_t>(h.n_expert_used) + (h.has_weights ? 4 * static_cast<size_t>(h.n_expert_used) : 0);
}

// ---------------------------------------------------------------------------------------------
// Writer

TraceWriter::TraceWriter(const std::string& path, const TraceHeader& header, TraceWriterOptions opt)
    : path_(path), header_(header), opt_(opt), order_(header.n_layer) {
    header_.validate(path);
    if (header_.model_name.size() > kTraceMaxNameBytes)
        fail("{}: model name of {} bytes is longer than {}", path, header_.model_name.size(), kTraceMaxNameBytes);
    if (opt_.records_per_chunk < 1 || opt_.records_per_chunk > kTraceMaxChunkRecords)
        fail("{}: {} records per chunk is out of range (1..{})", path, opt_.records_per_chunk, kTraceMaxChunkRecords);
    f_ = std::fopen(path.c_str(), "wb");
    if (!f_) fail("{}: cannot create trace file: {}", path, std::strerror(errno));
    const std::vector<uint8_t> h = encode_header(header_);
    put(h.data(), h.size());
    chunk_.reserve(kChunkHeaderBytes + trace_record_bytes(header_) * opt_.records_per_chunk);
}

TraceWriter::~TraceWriter() {
    if (!f_) return;
    try {
        close();
    } catch (const Error& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
    }
}

void TraceWriter::put(const void* p, size_t n) {
    if (std::fwrite(p, 1, n, f_) != n) fail("{}: write failed: {}", path_, std::strerror(errno));
}

void TraceWriter::write(const TraceRecordIn& r) {
    if (!f_) fail("{}: write after close", path_);
    std::string why = validate_record(header_, r);
    if (why.empty()) why = order_.check(r.seq, r.layer, r.pos);
    if (!why.empty()) fail("{}: record {}: {}", path_, n_records_, why);
    if (chunk_records_ == 0) chunk_.assign(kChunkHeaderBytes, 0);
    encode_record(chunk_, r);
    ++chunk_records_;
    ++n_records_;
    if (chunk_records_ == opt_.records_per_chunk) flush_chunk();
}

void TraceWriter::write_block(uint32_t seq, uint32_t pos0, TracePhase phase, uint32_t layer, uint32_t n_tokens,
                              std::span<const ExpertId> ids, std::span<const float> weights) {
    const size_t k = header_.n_expert_used;
    if (ids.size() != n_tokens * k || (!weights.empty() && weights.size() != n_tokens * k))
        fail("{}: block of {} tokens needs {} ids (and weights), got {} ids and {} weights", path_, n_tokens,
             n_tokens * k, ids.size(), weights.size());
    for (uint32_t t = 0; t < n_tokens; ++t)
        write({seq, pos0 + t, phase, layer, ids.subspan(t * k, k),
               weights.empty() ? std::span<const float>{} : weights.subspan(t * k, k)});
}

void TraceWriter::flush_chunk() {
    if (chunk_records_ == 0) return;
    const uint8_t* records = chunk_.data() + kChunkHeaderBytes;
    const size_t n = chunk_.size() - kChunkHeaderBytes;
    std::vector<uint8_t> head(kMagicChunk, kMagicChunk + 4);
    put_le(head, chunk_records_, 4);
    put_le(head, XXH3_64bits(records, n), 8);
    std::memcpy(chunk_.data(), head.data(), kChunkHeaderBytes);
    put(chunk_.data(), chunk_.size());
    ++n_chunks_;
    chunk_records_ = 0;
    chunk_.clear();
}

void TraceWriter::close() {
    if (!f_) return;
    std::FILE* f = f_;
    try {
        flush_chunk();
        std::vector<uint8_t> end(kMagicEnd, kMagicEnd + 4);
        put_le(end, n_chunks_, 4);
        put_le(end, n_records_, 8);
        put_le(end, XXH3_64bits(end.data(), end.size()), 8);
        put(end.data(), end.size());
    } catch (...) {
        f_ = nullptr;
        std::fclose(f);
        throw;
    }
    f_ = nullptr;
    if (std::fclose(f) != 0) fail("{}: closing the trace file failed: {}", path_, std::strerror(errno));
}

void write_trace(const std::string& path, const Trace& trace, TraceWriterOptions opt) {
    TraceWriter w(path, trace.header, opt);
    for (size_t i = 0; i < trace.size(); ++i) w.write(trace.record(i));
    w.close();
}

// ---------------------------------------------------------------------------------------------
// Reader

bool is_binary_trace(const std::string& path) {
    check_user_file(path, "trace");
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) fail("{}: cannot open: {}", path, std::strerror(errno));
    char m[4] = {};
    const size_t n = std::fread(m, 1, 4, f);
    std::fclose(f);
    return n == 4 && std::memcmp(m, kMagicHeader, 4) == 0;
}

Trace read_trace(const std::string& path, TraceFileInfo* info) {
    MappedFile file(path);
    const uint8_t* d = file.data();
    const uint64_t size = file.size();
    Trace t;
    TraceHeader& h = t.header;

    // Header.
    if (size < 48 || std::memcmp(d, kMagicHeader, 4) != 0)
        fail("{}: offset 0: not a nitro trace (expected magic \"NMTR\")", path);
    const uint32_t version = static_cast<uint32_t>(get_le(d + 4, 4));
    if (version != 1 && version != kTraceVersion)
        fail("{}: offset 4: version {} is not supported (expected 1..{})", path, version, kTraceVersion);
    const uint64_t header_size = get_le(d + 8, 4);
    h.n_layer = static_cast<uint32_t>(get_le(d + 12, 4));
    h.n_expert = static_cast<uint32_t>(get_le(d + 16, 4));
    h.n_expert_used = static_cast<uint32_t>(get_le(d + 20, 4));
    const uint32_t flags = static_cast<uint32_t>(get_le(d + 24, 4));
    const uint32_t name_len = static_cast<uint32_t>(get_le(d + 28, 4));
    h.model_hash = get_le(d + 32, 8);
    if (name_len > kTraceMaxNameBytes) fail("{}: offset 28: model name length {} exceeds {}", path, name_len, kTraceMaxNameBytes);
    if (flags & ~1u) fail("{}: offset 24: unknown flags {:#x}", path, flags);
    h.has_weights = flags & 1;
    const uint64_t per_layer = version == 1 ? 8 : 12;  // expert bytes (+ expert count from version 2)
    const uint64_t expect_size = 40ull + name_len + per_layer * h.n_layer + 8;
    if (header_size != expect_size || header_size > size)
        fail("{}: offset 8: header size {} does not match its fields ({} bytes) or the file ({} bytes)", path,
             header_size, expect_size, size);
    const uint64_t stored_sum = get_le(d + header_size - 8, 8);
    if (XXH3_64bits(d, header_size - 8) != stored_sum)
        fail("{}: offset 0: header checksum mismatch (the header bytes were changed after writing)", path);
    h.model_name.assign(reinterpret_cast<const char*>(d + 40), name_len);
    h.bytes_per_expert_per_layer.resize(h.n_layer);
    for (uint32_t l = 0; l < h.n_layer; ++l) h.bytes_per_expert_per_layer[l] = get_le(d + 40 + name_len + 8 * l, 8);
    if (version >= 2) {
        h.layer_n_expert.resize(h.n_layer);
        for (uint32_t l = 0; l < h.n_layer; ++l)
            h.layer_n_expert[l] = static_cast<uint32_t>(get_le(d + 40 + name_len + 8 * h.n_layer + 4 * l, 4));
    }
    h.validate(fmt::format("{}: header", path));

    // Chunks.
    const size_t rb = trace_record_bytes(h);
    uint64_t off = header_size;
    uint32_t n_chunks = 0;
    std::vector<ExpertId> ids_buf;
    std::vector<float> w_buf;
    PositionOrder order(h.n_layer);
    // Validates the records of one chunk; returns the index of the first bad one (or n) and why.
    auto check_records = [&](const uint8_t* p, uint32_t n, std::string* why, bool append) -> uint32_t {
        for (uint32_t i = 0; i < n; ++i) {
            const TraceRecordIn r = decode_record(h, p + i * rb, ids_buf, w_buf);
            *why = validate_record(h, r);
            if (why->empty()) *why = order.check(r.seq, r.layer, r.pos);
            if (!why->empty()) return i;
            if (append) {
                t.seq.push_back(r.seq);
                t.pos.push_back(r.pos);
                t.phase.push_back(r.phase);
                t.layer.push_back(static_cast<uint16_t>(r.layer));
                t.ids.insert(t.ids.end(), r.ids.begin(), r.ids.end());
                t.weights.insert(t.weights.end(), r.weights.begin(), r.weights.end());
            }
        }
        return n;
    };
    for (;;) {
        if (off == size) fail("{}: offset {}: file ends without an end marker (the capture was not closed)", path, off);
        if (size - off < 16) fail("{}: offset {}: truncated ({} bytes left, a chunk header needs 16)", path, off, size - off);
        if (std::memcmp(d + off, kMagicEnd, 4) == 0) break;
        if (std::memcmp(d + off, kMagicChunk, 4) != 0)
            fail("{}: offset {}: expected a chunk (\"NMCK\") or the end marker (\"NMEN\")", path, off);
        const uint32_t n = static_cast<uint32_t>(get_le(d + off + 4, 4));
        const uint64_t sum = get_le(d + off + 8, 8);
        if (n < 1 || n > kTraceMaxChunkRecords)
            fail("{}: offset {}: chunk record count {} is out of range (1..{})", path, off + 4, n, kTraceMaxChunkRecords);
        const uint64_t first = off + kChunkHeaderBytes;
        if (size - first < static_cast<uint64_t>(n) * rb)
            fail("{}: offset {}: chunk of {} records ({} bytes each) runs past the end of the file", path, off, n, rb);
        std::string why;
        if (XXH3_64bits(d + first, n * rb) != sum) {
            // Find the first record that breaks a rule; if none does, the change kept records valid.
            const uint32_t bad = check_records(d + first, n, &why, false);
            if (bad < n)
                fail("{}: offset {}: record {}: {} (chunk checksum mismatch)", path, first + bad * rb, t.size() + bad, why);
            fail("{}: offset {}: chunk checksum mismatch in records {}..{} (first record at offset {})", path, off,
                 t.size(), t.size() + n - 1, first);
        }
        const uint32_t bad = check_records(d + first, n, &why, true);
        if (bad < n) fail("{}: offset {}: record {}: {}", path, first + bad * rb, t.size(), why);
        off = first + n * rb;
        ++n_chunks;
    }
    // End marker.
    if (size - off != kEndBytes)
        fail("{}: offset {}: end marker must be the last {} bytes ({} bytes follow)", path, off, kEndBytes, size - off);
    const uint32_t end_chunks = static_cast<uint32_t>(get_le(d + off + 4, 4));
    const uint64_t end_records = get_le(d + off + 8, 8);
    if (XXH3_64bits(d + off, 16) != get_le(d + off + 16, 8))
        fail("{}: offset {}: end marker checksum mismatch", path, off);
    if (end_chunks != n_chunks || end_records != t.size())
        fail("{}: offset {}: end marker counts {} chunks and {} records, the file holds {} and {}", path, off,
             end_chunks, end_records, n_chunks, t.size());
    if (info) *info = TraceFileInfo{size, version, n_chunks, header_size};
    return t;
}

}  // namespace nitro
