// Quantized matrix products: tensor views, activation conversion, ISA dispatch and the batched
// row-chunk scheduler. The dot-product kernels live in vec_dot_*.cpp and kquants_*.cpp.
//
// Scheduling (matmul_batch): the rows of every job are cut into chunks of at most kRowsPerChunk
// rows and ALL chunks of ALL jobs go to one parallel region, cut into one contiguous run of
// chunks per thread (so each thread streams consecutive rows; WorkRanges steals from the back of
// other runs at the end). Inside a chunk, tokens are processed in tiles of kMaxTokens (16), each
// tile one tile-kernel call over the chunk's rows: the kernel decodes each weight group once for
// every token of the tile and keeps the tile's activations in L1 across a few rows at a time; the
// chunk (<= 32 rows) stays in L2 across token tiles. Every output element is computed by per-token
// operations whose operands and order do not depend on the thread count, the chunking, the row
// blocks or the token grouping: results are bit-identical for any pool size.
#include "cpu/matmul.h"

#include "core/error.h"
#include "core/fp16.h"
#include "cpu/cpu_features.h"
#include "cpu/kernels.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <optional>
#include <cstdlib>
#include <cstring>
#include <string_view>

namespace nitro::cpu::kernels {
int64_t g_prefetch_bytes = kDefaultPrefetchBytes;
int g_prefetch_hint = 0;
}  // namespace nitro::cpu::kernels

namespace nitro::cpu {
namespace {

using kernels::kMaxTokens;

/// Rows per scheduling chunk (upper bound; smaller when there are few rows per thread).
constexpr int64_t kRowsPerChunk = 32;

/// Kernel levels, in order of preference. They are not nested: AVX-VNNI (the VEX-encoded vpdpbusd
/// of Alder Lake and later, Zen 5) is missing on AVX-512 CPUs such as Zen 4 and Ice Lake, so each
/// level is checked on its own (has_isa).
enum class Isa { Scalar = 0, Avx2 = 1, AvxVnni = 2, Avx512 = 3 };
constexpr int kIsaCount = 4;

/// Whether this CPU runs the kernels of `isa`, from cpu_features() (CPUID + XCR0). The AVX2 files are
/// compiled with -mavx2 -mfma -mf16c and need all three; the AVX-VNNI files add -mavxvnni; the
/// AVX-512 files add F, BW, VL, DQ and VNNI (a CPU with AVX-512 but no VNNI, e.g. Skylake-X, uses
/// the AVX2 kernels).
bool has_isa(Isa isa) {
    const CpuFeatures& f = cpu_features();
    const bool avx2 = f.avx2 && f.fma && f.f16c;
    switch (isa) {
        case Isa::Scalar:
            return true;
        case Isa::Avx2:
            return avx2;
        case Isa::AvxVnni:
            return avx2 && f.avx_vnni;
        case Isa::Avx512:
            return avx2 && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.avx512vnni;
    }
    return false;
}

/// The best level this CPU has at or below `limit`.
Isa best_isa(Isa limit = Isa::Avx512) {
    for (int i = static_cast<int>(limit); i > 0; --i)
        if (has_isa(static_cast<Isa>(i))) return static_cast<Isa>(i);
    return Isa::Scalar;
}

/// The level named `isa`, or nullopt for another name.
std::optional<Isa> find_isa(std::string_view isa) {
    if (isa == "scalar") return Isa::Scalar;
    if (isa == "avx2") return Isa::Avx2;
    if (isa == "avxvnni") return Isa::AvxVnni;
    if (isa == "avx512") return Isa::Avx512;
    return std::nullopt;
}

Isa parse_isa(std::string_view isa) {
    if (const auto l = find_isa(isa)) return *l;
    fail("unknown instruction set '{}' (expected scalar, avx2, avxvnni or avx512)", isa);
}

const char* isa_name(Isa isa) {
    switch (isa) {
        case Isa::Avx512:
            return "avx512";
        case Isa::AvxVnni:
            return "avxvnni";
        case Isa::Avx2:
            return "avx2";
        default:
            return "scalar";
    }
}

/// Best level, lowered by NITRO_ISA=scalar|avx2|avxvnni|avx512 to the best level the CPU has at or
/// below it (never raised above the hardware).
Isa selected_isa() {
    if (const char* env = std::getenv("NITRO_ISA"); env && *env) {
        const auto want = find_isa(env);
        if (!want) fail("NITRO_ISA={} is not one of scalar, avx2, avxvnni, avx512", env);
        return best_isa(*want);
    }
    return best_isa();
}

/// The kernel table of one level: scalar entries overridden by AVX2's and then by the level's own.
kernels::Table make_table(Isa isa) {
    kernels::Table t;
    kernels::fill_scalar(t);
    if (isa >= Isa::Avx2) {
        kernels::fill_avx2(t);
        kernels::fill_kquants_avx2(t);
    }
    if (isa == Isa::AvxVnni) {
        kernels::fill_avxvnni(t);
        kernels::fill_kquants_avxvnni(t);
    }
    if (isa == Isa::Avx512) {
        kernels::fill_avx512(t);
        kernels::fill_kquants_avx512(t);
    }
    return t;
}

/// The table of `isa`, built on first use. Only levels the CPU has may be asked for: the fill_*
/// functions are compiled with their ISA's flags, so even filling the table may use its
/// instructions (callers check has_isa()).
const kernels::Table& table_for(Isa isa) {
    NITRO_CHECK(has_isa(isa));
    static const kernels::Table scalar = make_table(Isa::Scalar);
    switch (isa) {
        case Isa::Avx2: {
            static const kernels::Table avx2 = make_table(Isa::Avx2);
            return avx2;
        }
        case Isa::AvxVnni: {
            static const kernels::Table avxvnni = make_table(Isa::AvxVnni);
            return avxvnni;
        }
        case Isa::Avx512: {
            static const kernels::Table avx512 = make_table(Isa::Avx512);
            return avx512;
        }
        default:
            return scalar;
    }
}

struct Dispatch {
    Isa isa;
    const kernels::Table* table;
};

/// The level in use: selected_isa() on first use; set_kernel_isa (benchmarks) may switch it.
std::atomic<const Dispatch*> g_dispatch{nullptr};

const Dispatch& dispatch_of(Isa isa) {
    static Dispatch d[kIsaCount] = {
        {Isa::Scalar, nullptr}, {Isa::Avx2, nullptr}, {Isa::AvxVnni, nullptr}, {Isa::Avx512, nullptr}};
    static std::once_flag once[kIsaCount];
    std::call_once(once[static_cast<int>(isa)], [isa] { d[static_cast<int>(isa)].table = &table_for(isa); });
    return d[static_cast<int>(isa)];
}

const Dispatch& dispatch() {
    const Dispatch* d = g_dispatch.load(std::memory_order_acquire);
    if (!d) {
        static const Dispatch* first = &dispatch_of(selected_isa());
        const Dispatch* expected = nullptr;
        g_dispatch.compare_exchange_strong(expected, first, std::memory_order_acq_rel);
        d = g_dispatch.load(std::memory_order_acquire);
    }
    return *d;
}

kernels::Kernel kernel_of(const kernels::Table& tb, GgmlType t) {
    const auto id = static_cast<uint32_t>(t);
    kernels::Kernel k;
    if (id < kernels::kTypeSlots) k = {tb.tile[id], tb.dot[id]};
    if (!k.tile && !k.dot) fail("no CPU matmul kernel for weight type {}", type_display_name(t));
    return k;
}

kernels::Kernel kernel_for(GgmlType t) { return kernel_of(*dispatch().table, t); }

/// One scheduling unit: rows [r0, r1) of job `job`.
struct Chunk {
    int32_t job;
    int64_t r0, r1;
};

/// True for the activation types that carry block_scales.
bool has_block_scales(GgmlType t) { return t == GgmlType::Q8_0 || t == GgmlType::Q8_1; }

}  // namespace

kernels::ActRow kernels::act_row(const ActBuffer& a, int64_t t) {
    kernels::ActRow r{a.row(t), a.block_scales.empty() ? nullptr : a.block_scales.data() + t * (a.ne0 / 32)};
    if (a.simd_stride) {
        const uint8_t* s = a.simd.data() + static_cast<size_t>(t) * a.simd_stride;
        r.img = reinterpret_cast<const int8_t*>(s);
        if (a.simd_dx) r.dx = reinterpret_cast<const float*>(s + a.simd_dx);
        if (a.simd_corr) r.corr = reinterpret_cast<const int32_t*>(s + a.simd_corr);
        if (a.simd_sx) r.sx = reinterpret_cast<const float*>(s + a.simd_sx);
    }
    return r;
}

namespace {

}  // namespace

namespace {

/// Rows [r0, r1) of job j for its tokens [t0, t1) (at most kMaxTokens; `a` their rows) with kernel k.
void run_tile(const MatmulJob& j, const kernels::Kernel& k, const kernels::ActRow* a, int64_t t0, int64_t t1, int64_t r0,
              int64_t r1) {
    float* out = j.out + t0 * j.out_stride + r0;
    if (k.tile) {
        kernels::TileArgs ta;
        ta.n = j.w.ne0;
        ta.w = j.w.row(r0);
        ta.w_end = j.w.row(j.w.n_rows);  // the view's rows (the row after r1 - 1 when there is one)
        ta.row_bytes = j.w.row_bytes;
        ta.n_rows = r1 - r0;
        ta.a = a;
        ta.nt = static_cast<int>(t1 - t0);
        ta.out = out;
        ta.out_stride = j.out_stride;
        k.tile(ta);
        return;
    }
    float res[kernels::kDotMaxTokens];
    for (int64_t r = r0; r < r1; ++r) {
        for (int64_t t = t0; t < t1; t += kernels::kDotMaxTokens) {
            const int nt = static_cast<int>(std::min<int64_t>(kernels::kDotMaxTokens, t1 - t));
            k.dot(j.w.ne0, j.w.row(r), a + (t - t0), nt, res);
            for (int q = 0; q < nt; ++q) j.out[(t + q) * j.out_stride + r] = res[q];
        }
    }
}

/// Rows per block of run_rows_interleaved.
constexpr int64_t kInterleaveRows = 4;

}  // namespace

void kernels::run_rows(const MatmulJob& j, const kernels::Kernel& k, int64_t r0, int64_t r1) {
    kernels::ActRow a[kMaxTokens];
    for (int64_t t0 = 0; t0 < j.n_tokens; t0 += kMaxTokens) {
        const int64_t t1 = std::min(j.n_tokens, t0 + kMaxTokens);
        for (int64_t t = t0; t < t1; ++t) a[t - t0] = kernels::act_row(*j.acts, j.token_ids ? j.token_ids[t] : t);
        run_tile(j, k, a, t0, t1, r0, r1);
    }
}

void kernels::run_rows_interleaved(const MatmulJob* const* jobs, const kernels::Kernel* ks, int n_jobs, int64_t r0,
                                   int64_t r1) {
    // Every job's tokens fit one tile: each job's activation rows are built once, then a block of
    // rows of every job in turn, so all the jobs' weight streams advance together.
    constexpr int kMaxJobs = 16;
    kernels::ActRow a[kMaxJobs][kMaxTokens];
    bool small = n_jobs <= kMaxJobs;
    for (int k = 0; k < n_jobs && small; ++k) small = jobs[k]->n_tokens <= kMaxTokens;
    if (!small) {
        for (int k = 0; k < n_jobs; ++k) kernels::run_rows(*jobs[k], ks[k], r0, r1);
        return;
    }
    for (int k = 0; k < n_jobs; ++k) {
        const MatmulJob& j = *jobs[k];
        for (int64_t t = 0; t < j.n_tokens; ++t) a[k][t] = kernels::act_row(*j.acts, j.token_ids ? j.token_ids[t] : t);
    }
    for (int64_t r = r0; r < r1; r += kInterleaveRows) {
        const int64_t re = std::min(r1, r + kInterleaveRows);
        for (int k = 0; k < n_jobs; ++k)
            if (jobs[k]->n_tokens > 0) run_tile(*jobs[k], ks[k], a[k], 0, jobs[k]->n_tokens, r, re);
    }
}

namespace {

void check_job(const MatmulJob& j, size_t index) {
    if (j.n_tokens < 0 || j.w.n_rows < 0) fail("matmul job {}: negative size", index);
    if (j.n_tokens == 0 || j.w.n_rows == 0) return;
    if (!j.acts || !j.out || !j.w.data) fail("matmul job {}: missing weights, activations or output", index);
    if (j.acts->ne0 != j.w.ne0)
        fail("matmul job {}: activations have {} values per row, weights {}", index, j.acts->ne0, j.w.ne0);
    if (j.acts->type != vec_dot_type(j.w.type))
        fail("matmul job {}: activations are {}, weight type {} needs {}", index, type_display_name(j.acts->type),
             type_display_name(j.w.type), type_display_name(vec_dot_type(j.w.type)));
    if (j.acts->data.size() < j.acts->row_bytes * static_cast<size_t>(j.acts->n_tokens) ||
        (has_block_scales(j.acts->type) &&
         j.acts->block_scales.size() != static_cast<size_t>(j.acts->n_tokens * (j.acts->ne0 / 32))))
        fail("matmul job {}: the activation buffer was not filled by quantize_acts", index);
    if (j.acts->weight_type != j.w.type) {
        // Same vec-dot type, but the SIMD views may differ (image order, offset corrections).
        const kernels::ActLayout a = kernels::act_layout(j.acts->weight_type, j.w.ne0);
        const kernels::ActLayout w = kernels::act_layout(j.w.type, j.w.ne0);
        if (a.order != w.order || (a.sx == 0) != (w.sx == 0) || a.corr_offset != w.corr_offset || a.stride != w.stride)
            fail("matmul job {}: activations were prepared for weight type {}, not {}", index,
                 type_display_name(j.acts->weight_type), type_display_name(j.w.type));
    }
    if (j.acts->simd.size() != j.acts->simd_stride * static_cast<size_t>(j.acts->n_tokens))
        fail("matmul job {}: the activation buffer was not filled by quantize_acts", index);
    if (j.n_tokens > 1 && j.out_stride < j.w.n_rows)
        fail("matmul job {}: out_stride {} is smaller than the {} rows", index, j.out_stride, j.w.n_rows);
    if (!j.token_ids && j.n_tokens > j.acts->n_tokens)
        fail("matmul job {}: {} tokens but only {} activation rows", index, j.n_tokens, j.acts->n_tokens);
    if (j.token_ids) {
        for (int64_t t = 0; t < j.n_tokens; ++t) {
            if (j.token_ids[t] < 0 || j.token_ids[t] >= j.acts->n_tokens)
                fail("matmul job {}: token id {} out of range [0, {})", index, j.token_ids[t], j.acts->n_tokens);
        }
    }
}

WeightView make_view(const GgufTensorInfo& t, const uint8_t* data, int64_t n_rows) {
    WeightView v;
    v.type = t.type;
    v.data = data;
    v.ne0 = t.ne[0];
    v.n_rows = n_rows;
    v.row_bytes = row_size(t.type, t.ne[0]);
    return v;
}

}  // namespace

WeightView weight_view(const GgufTensorInfo& t) {
    if (t.n_dims > 2 || t.ne[2] != 1 || t.ne[3] != 1)
        fail("tensor '{}' has shape {}: a 2-D weight matrix was expected", t.name, t.shape_string());
    if (!t.data) fail("tensor '{}' has no data", t.name);
    return make_view(t, t.data, t.ne[1]);
}

WeightView expert_view(const GgufTensorInfo& t, int64_t e) {
    if (t.n_dims != 3 || t.ne[3] != 1)
        fail("tensor '{}' has shape {}: a 3-D expert tensor [ne0, ne1, n_expert] was expected", t.name,
             t.shape_string());
    if (e < 0 || e >= t.ne[2]) fail("tensor '{}': expert {} out of range [0, {})", t.name, e, t.ne[2]);
    if (!t.data) fail("tensor '{}' has no data", t.name);
    const size_t rb = row_size(t.type, t.ne[0]);
    return make_view(t, t.data + static_cast<size_t>(e) * static_cast<size_t>(t.ne[1]) * rb, t.ne[1]);
}

GgmlType vec_dot_type(GgmlType weight) {
    switch (weight) {
        case GgmlType::F32: return GgmlType::F32;
        case GgmlType::F16: return GgmlType::F16;
        case GgmlType::BF16: return GgmlType::BF16;
        case GgmlType::Q4_0:
        case GgmlType::Q5_0:
        case GgmlType::Q8_0:
        case GgmlType::MXFP4:
        case GgmlType::IQ4_NL: return GgmlType::Q8_0;
        case GgmlType::Q4_1:
        case GgmlType::Q5_1: return GgmlType::Q8_1;
        case GgmlType::Q2_K:
        case GgmlType::Q3_K:
        case GgmlType::Q4_K:
        case GgmlType::Q5_K:
        case GgmlType::Q6_K:
        case GgmlType::IQ4_XS: return GgmlType::Q8_K;
        default: fail("weight type {} has no CPU matmul kernel", type_display_name(weight));
    }
}

void act_buffer_init(ActBuffer& out, int64_t n_tokens, int64_t ne0, GgmlType weight_type) {
    const GgmlType vt = vec_dot_type(weight_type);
    if (n_tokens < 0) fail("quantize_acts: negative token count {}", n_tokens);
    const size_t rb = row_size(vt, ne0);  // throws if ne0 is not a multiple of the block size
    NITRO_CHECK(type_traits(vt).quantize != nullptr);
    out.type = vt;
    out.weight_type = weight_type;
    out.ne0 = ne0;
    out.n_tokens = n_tokens;
    out.row_bytes = rb;
    out.data.resize(rb * static_cast<size_t>(n_tokens));
    out.block_scales.clear();
    if (has_block_scales(vt)) out.block_scales.resize(static_cast<size_t>(n_tokens * (ne0 / 32)));
    const kernels::ActLayout l = kernels::act_layout(weight_type, ne0);
    out.simd_stride = l.stride;
    out.simd_dx = l.dx;
    out.simd_corr = l.corr;
    out.simd_sx = l.sx;
    out.simd.resize(l.stride * static_cast<size_t>(n_tokens));
}

void quantize_act_piece(ActBuffer& out, int64_t t, const float* x_row, int64_t v0, int64_t nv) {
    const auto& tt = type_traits(out.type);
    const size_t off = static_cast<size_t>(v0 / tt.block_size) * tt.type_size;
    uint8_t* row = out.data.data() + static_cast<size_t>(t) * out.row_bytes;
    tt.quantize(x_row + v0, row + off, nv);
    if (has_block_scales(out.type)) {
        const int64_t nb = out.ne0 / 32;
        for (int64_t b = v0 / 32; b < (v0 + nv) / 32; ++b)  // d is the first field of Q8_0 and Q8_1 blocks
            out.block_scales[static_cast<size_t>(t * nb + b)] = fp16_to_f32(kernels::load_u16(row + b * tt.type_size));
    }
    if (out.simd_stride) {
        const kernels::ActLayout l = kernels::act_layout(out.weight_type, out.ne0);
        kernels::fill_act_simd(l, out.weight_type, out.ne0, row, v0, nv, out.simd.data() + static_cast<size_t>(t) * out.simd_stride);
    }
}

kernels::Kernel kernels::active_kernel(GgmlType t) { return kernel_for(t); }

namespace {

/// Shared body of both quantize_acts: sizes `out`, then `for_pieces(n_pieces, fn)` runs
/// fn(piece) for every piece of kActPiece values (whole blocks and SIMD groups; blocks are
/// independent, so the bytes do not depend on the split).
constexpr int64_t kActPiece = 1024;

template <class ForPieces>
void quantize_acts_impl(const float* x, int64_t n_tokens, int64_t ne0, GgmlType weight_type, ActBuffer& out,
                        ForPieces&& for_pieces) {
    act_buffer_init(out, n_tokens, ne0, weight_type);
    const int64_t per_row = (ne0 + kActPiece - 1) / kActPiece;
    for_pieces(n_tokens * per_row, [&](int64_t piece) {
        const int64_t t = piece / per_row, v0 = (piece % per_row) * kActPiece, nv = std::min(kActPiece, ne0 - v0);
        quantize_act_piece(out, t, x + t * ne0, v0, nv);
    });
}

}  // namespace

void quantize_acts(const float* x, int64_t n_tokens, int64_t ne0, GgmlType weight_type, ActBuffer& out) {
    quantize_acts_impl(x, n_tokens, ne0, weight_type, out, [](int64_t n, const auto& fn) {
        for (int64_t i = 0; i < n; ++i) fn(i);
    });
}

void quantize_acts(ThreadPool& pool, const float* x, int64_t n_tokens, int64_t ne0, GgmlType weight_type,
                   ActBuffer& out) {
    quantize_acts_impl(x, n_tokens, ne0, weight_type, out, [&pool](int64_t n, const auto& fn) {
        pool.parallel_for(n, 1, [&](int64_t b, int64_t e, int) {
            for (int64_t i = b; i < e; ++i) fn(i);
        });
    });
}

void check_matmul_job(const MatmulJob& j) { check_job(j, 0); }

void matmul_batch(ThreadPool& pool, std::span<const MatmulJob> jobs) {
    std::vector<kernels::Kernel> fns(jobs.size());
    int64_t total_rows = 0;
    for (size_t i = 0; i < jobs.size(); ++i) {
        check_job(jobs[i], i);
        if (jobs[i].n_tokens > 0) {
            fns[i] = kernel_for(jobs[i].w.type);
            total_rows += jobs[i].w.n_rows;
        }
    }
    if (total_rows == 0) return;
    // Chunk size: at most kRowsPerChunk, small enough for ~8 chunks per thread (the tail after the
    // last steal is one chunk), at least 4 rows. Determinism does not depend on it.
    const int W = pool.size();
    const int64_t per_thread = total_rows / (8 * static_cast<int64_t>(W));
    const int64_t rows_per_chunk = std::clamp<int64_t>(per_thread, 4, kRowsPerChunk);
    std::vector<Chunk> chunks;
    chunks.reserve(static_cast<size_t>(total_rows / rows_per_chunk + jobs.size()));
    for (size_t i = 0; i < jobs.size(); ++i) {
        if (jobs[i].n_tokens <= 0) continue;
        for (int64_t r = 0; r < jobs[i].w.n_rows; r += rows_per_chunk)
            chunks.push_back({static_cast<int32_t>(i), r, std::min(jobs[i].w.n_rows, r + rows_per_chunk)});
    }
    // One contiguous run of chunks per thread (each streams consecutive rows), cut by estimated
    // cost (rows x (tokens + 4): reading a row costs about four tokens' arithmetic), with stealing.
    auto cost = [&](const Chunk& c) { return (c.r1 - c.r0) * (jobs[static_cast<size_t>(c.job)].n_tokens + 4); };
    int64_t total = 0;
    for (const Chunk& c : chunks) total += cost(c);
    std::vector<int64_t> split(static_cast<size_t>(W) + 1, 0);
    int64_t acc = 0;
    size_t u = 0;
    for (int w = 1; w <= W; ++w) {
        const int64_t target = total * w / W;
        while (u < chunks.size() && acc < target) acc += cost(chunks[u++]);
        split[static_cast<size_t>(w)] = w == W ? static_cast<int64_t>(chunks.size()) : static_cast<int64_t>(u);
    }
    WorkRanges ranges;
    ranges.reset(split);
    pool.parallel_for(W, 1, [&](int64_t b, int64_t e, int) {
        for (int64_t w = b; w < e; ++w)
            for (int64_t c; ranges.next(static_cast<int>(w), c);) {
                const Chunk& ch = chunks[static_cast<size_t>(c)];
                kernels::run_rows(jobs[static_cast<size_t>(ch.job)], fns[static_cast<size_t>(ch.job)], ch.r0, ch.r1);
            }
    });
}

void matmul(ThreadPool& pool, const WeightView& w, const ActBuffer& acts, float* out) {
    MatmulJob j;
    j.w = w;
    j.acts = &acts;
    j.n_tokens = acts.n_tokens;
    j.out = out;
    j.out_stride = w.n_rows;
    matmul_batch(pool, std::span<const MatmulJob>(&j, 1));
}

float dot_f16(int64_t n, const uint16_t* a, const uint16_t* b) {
    static const kernels::DotFn f = kernel_for(GgmlType::F16).dot;
    const kernels::ActRow row{reinterpret_cast<const uint8_t*>(b), nullptr};
    float r;
    f(n, reinterpret_cast<const uint8_t*>(a), &row, 1, &r);
    return r;
}

void axpy_f16(int64_t n, float w, const uint16_t* v, float* acc) { dispatch().table->axpy_f16(n, w, v, acc); }

float vec_dot_reference(GgmlType w, int64_t n, const void* wrow, const void* arow) {
    row_size(w, n);  // throws if n is not a multiple of the block size
    return kernels::dot_scalar(w, n, wrow, arow);
}

const char* kernel_isa() { return isa_name(dispatch().isa); }

void set_prefetch_bytes(int64_t bytes) {
    if (bytes < 0 || bytes > 65536) fail("prefetch distance {} bytes is outside [0, 65536]", bytes);
    kernels::g_prefetch_bytes = bytes;
}

int64_t prefetch_bytes() { return kernels::g_prefetch_bytes; }

namespace {
constexpr const char* kPrefetchHints[] = {"t0", "t1", "t2", "nta"};
}  // namespace

void set_prefetch_hint(std::string_view hint) {
    for (int i = 0; i < 4; ++i)
        if (hint == kPrefetchHints[i]) {
            kernels::g_prefetch_hint = i;
            return;
        }
    fail("prefetch hint '{}' is not one of t0, t1, t2, nta", hint);
}

const char* prefetch_hint() { return kPrefetchHints[kernels::g_prefetch_hint]; }

void set_kernel_isa(std::string_view isa) {
    const Isa level = parse_isa(isa);
    if (!has_isa(level)) fail("this CPU cannot run the {} kernels", isa);
    g_dispatch.store(&dispatch_of(level), std::memory_order_release);
}

std::vector<std::string> available_isas() {
    std::vector<std::string> r;
    for (int i = 0; i < kIsaCount; ++i)
        if (has_isa(static_cast<Isa>(i))) r.emplace_back(isa_name(static_cast<Isa>(i)));
    return r;
}

void matmul_isa(std::string_view isa, const WeightView& w, const void* const* arows, int nt, float* out) {
    const Isa level = parse_isa(isa);
    if (!has_isa(level)) fail("this CPU cannot run the {} kernels", isa);
    kernels::matmul_table(table_for(level), w, arows, nt, out);
}

void kernels::matmul_table(const Table& table, const WeightView& w, const void* const* arows, int nt, float* out) {
    if (nt < 1 || nt > kMaxTokens) fail("matmul_isa: {} tokens, expected 1..{}", nt, kMaxTokens);
    row_size(w.type, w.ne0);  // throws if ne0 is not a multiple of the block size
    const kernels::Kernel k = kernel_of(table, w.type);
    // Rows come as bare vec-dot-type bytes: derive the block scales and SIMD views as quantize_acts does.
    const int64_t n = w.ne0;
    const GgmlType vt = vec_dot_type(w.type);
    ActBuffer buf;
    buf.type = vt;
    buf.weight_type = w.type;
    buf.ne0 = n;
    buf.n_tokens = nt;
    buf.row_bytes = row_size(vt, n);
    for (int j = 0; j < nt; ++j) {
        const auto* q = static_cast<const uint8_t*>(arows[j]);
        buf.data.insert(buf.data.end(), q, q + buf.row_bytes);
    }
    const kernels::ActLayout l = kernels::act_layout(w.type, n);
    buf.simd_stride = l.stride;
    buf.simd_dx = l.dx;
    buf.simd_corr = l.corr;
    buf.simd_sx = l.sx;
    buf.simd.assign(l.stride * static_cast<size_t>(nt), 0xCD);  // stale bytes must not matter
    const int64_t nb = has_block_scales(vt) ? n / 32 : 0;
    buf.block_scales.resize(static_cast<size_t>(nb * nt));
    for (int j = 0; j < nt; ++j) {
        const uint8_t* q = buf.row(j);
        for (int64_t b = 0; b < nb; ++b)
            buf.block_scales[static_cast<size_t>(j * nb + b)] =
                fp16_to_f32(kernels::load_u16(q + b * static_cast<int64_t>(type_traits(vt).type_size)));
        // In pieces, as quantize_acts fills them.
        for (int64_t v0 = 0; v0 < n; v0 += 1024)
            kernels::fill_act_simd(l, w.type, n, q, v0, std::min<int64_t>(1024, n - v0), buf.simd.data() + j * l.stride);
    }
    MatmulJob job;
    job.w = w;
    job.acts = &buf;
    job.n_tokens = nt;
    job.out = out;
    job.out_stride = w.n_rows;
    kernels::run_rows(job, k, 0, w.n_rows);
}

void vec_dot_isa(std::string_view isa, GgmlType w, int64_t n, const void* wrow, const void* const* arows, int nt,
                 float* out) {
    row_size(w, n);  // throws if n is not a multiple of the block size
    matmul_isa(isa, WeightView{w, static_cast<const uint8_t*>(wrow), n, 1, row_size(w, n)}, arows, nt, out);
}

}  // namespace nitro::cpu
