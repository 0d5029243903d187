// Binary router-trace files (".nmtr"): a header, chunks of fixed-size records each with an
// XXH3-64 checksum, and an end marker. Byte-by-byte layout: docs/trace-format.md. Little-endian.
//
//   header  "NMTR" u32 version=2, u32 header_size, u32 n_layer, u32 n_expert, u32 n_expert_used,
//           u32 flags (bit 0 = weights), u32 name_len, u64 model_hash, name bytes,
//           u64 bytes_per_expert[n_layer], u32 layer_n_expert[n_layer] (version 2),
//           u64 XXH3-64 of all previous header bytes
//   chunk   "NMCK" u32 n_records, u64 XXH3-64 of the records, n_records x record
//   record  u32 seq, u32 pos, u16 layer, u8 phase, u8 n_used, u16 ids[k], (f32 weights[k])
//   end     "NMEN" u32 n_chunks, u64 n_records, u64 XXH3-64 of the 16 bytes before it
//
// Records are validated when written (TraceWriter) and when read (read_trace): a file that fails
// is rejected with the byte offset of the first bad record (or of the broken chunk/header part).
#pragma once

#include "trace/trace.h"

#include <cstdio>
#include <string>
#include <vector>

namespace nitro {

/// File-format constants.
/// Version 2 added each layer's routed-expert count (0 for a dense FFN layer); version 1 files
/// (every layer with n_expert experts) are still read.
inline constexpr uint32_t kTraceVersion = 2;
inline constexpr uint32_t kTraceMaxNameBytes = 4096;
inline constexpr uint32_t kTraceMaxChunkRecords = 1u << 20;

/// Size of one record in bytes for a header: 12 + 2k, + 4k with weights.
size_t trace_record_bytes(const TraceHeader& h);

/// Options of a TraceWriter.
struct TraceWriterOptions {
    uint32_t records_per_chunk = 4096;  ///< 1..kTraceMaxChunkRecords; a chunk is the unit of checksums
};

/// Streams records into a trace file. This is the capture API the engine calls once per
/// (token, layer) with the router's final expert ids and weights (after the device stream that
/// produced them is synchronised). Every record is validated before it is buffered; memory is one
/// chunk. Not thread-safe: one writer per capture, fed by one thread.
class TraceWriter {
public:
    /// Creates (truncates) `path` and writes the header. Throws nitro::Error naming the file if it
    /// cannot be created or the header is out of range.
    TraceWriter(const std::string& path, const TraceHeader& header, TraceWriterOptions opt = {});
    /// Closes the file if close() was not called; errors are then printed to stderr, not thrown.
    ~TraceWriter();
    TraceWriter(const TraceWriter&) = delete;
    TraceWriter& operator=(const TraceWriter&) = delete;

    /// Validates and appends one record. Throws nitro::Error "FILE: record N: why" if the record
    /// breaks a rule (trace.h); the record is then not written and the writer stays usable.
    void write(const TraceRecordIn& r);
    /// Appends one layer's routing for a block of tokens (prefill): token t has position
    /// pos0 + t, ids[t*k .. t*k+k) and weights likewise (empty span if the trace has none).
    void write_block(uint32_t seq, uint32_t pos0, TracePhase phase, uint32_t layer, uint32_t n_tokens,
                     std::span<const ExpertId> ids, std::span<const float> weights);
    /// Writes the last chunk and the end marker and closes the file. Throws on I/O errors.
    void close();

    uint64_t records_written() const { return n_records_; }
    const std::string& path() const { return path_; }

private:
    void flush_chunk();
    void put(const void* p, size_t n);
    std::string path_;
    TraceHeader header_;
    TraceWriterOptions opt_;
    std::FILE* f_ = nullptr;
    std::vector<uint8_t> chunk_;      // records of the current chunk
    uint32_t chunk_records_ = 0;
    uint32_t n_chunks_ = 0;
    uint64_t n_records_ = 0;
    PositionOrder order_;
};

/// Writes a whole in-memory trace (validating it). Throws nitro::Error.
void write_trace(const std::string& path, const Trace& trace, TraceWriterOptions opt = {});

/// What read_trace saw besides the records.
struct TraceFileInfo {
    uint64_t file_bytes = 0;
    uint32_t version = 0;
    uint32_t n_chunks = 0;
    uint64_t header_bytes = 0;
};

/// Reads and validates a trace file: header checksum and ranges, every chunk's checksum, every
/// record (trace.h rules), the end marker. Throws nitro::Error "FILE: offset X: ..." naming the
/// first bad record (or header field / chunk) otherwise.
Trace read_trace(const std::string& path, TraceFileInfo* info = nullptr);

/// Whether the file starts with the trace magic "NMTR" (to tell binary traces from JSON Lines).
bool is_binary_trace(const std::string& path);

}  // namespace nitro
