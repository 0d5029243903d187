#include "bench/bench.h"

#include "arch/summary.h"
#include "core/error.h"
#include "core/mapped_file.h"
#include "core/fp16.h"
#include "cpu/moe.h"
#include "runtime/model_spec.h"
#include "runtime/sampler.h"

#include <sys/mman.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <random>

namespace nitro {

namespace {
using Clock = std::chrono::steady_clock;
double secs(Clock::time_point a) { return std::chrono::duration<double>(Clock::now() - a).count(); }
constexpr size_t kHuge = size_t{2} << 20;

uint64_t xorshift(uint64_t& s) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
}
}  // namespace

BenchBuffer::BenchBuffer(cpu::ThreadPool& pool, size_t bytes) : size_(bytes) {
    // Every page is touched below: a buffer larger than the memory on hand would end in the OOM
    // killer (rc 137, no message, possibly other processes killed), so it is refused here.
    // MemAvailable: free memory plus what can be reclaimed (page cache); MemTotal where it is missing.
    const MemInfo mem = read_meminfo();
    if (const uint64_t avail = mem.available > 0 ? mem.available : mem.total; avail > 0 && bytes > avail)
        fail("bench: a buffer of {} is more than the {} of memory available now; lower --kernel-pool or --read-probe",
             format_bytes(bytes), format_bytes(avail));
    map_ = (bytes + kHuge - 1) / kHuge * kHuge + kHuge;
    void* raw = ::mmap(nullptr, map_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (raw == MAP_FAILED) fail("bench: cannot allocate {} ({} bytes): {}", format_bytes(map_), map_, std::strerror(errno));
    const auto a = reinterpret_cast<uintptr_t>(raw);
    data_ = reinterpret_cast<uint8_t*>((a + kHuge - 1) / kHuge * kHuge);
    ::madvise(data_, (bytes + kHuge - 1) / kHuge * kHuge, MADV_HUGEPAGE);
    // first touch in parallel, 2 MiB at a time
    uint8_t* d = data_;
    pool.parallel_for(static_cast<int64_t>((bytes + kHuge - 1) / kHuge), 1, [&](int64_t b, int64_t e, int) {
        for (int64_t i = b; i < e; ++i) {
            const size_t off = static_cast<size_t>(i) * kHuge;
            std::memset(d + off, 0, std::min(kHuge, bytes - off));
        }
    });
    base_ = raw;
}

BenchBuffer::~BenchBuffer() { ::munmap(base_, map_); }

double read_rate(cpu::ThreadPool& pool, const uint8_t* data, size_t bytes, int reps) {
    const size_t n = bytes / sizeof(uint64_t);
    const auto* buf = reinterpret_cast<const uint64_t*>(data);
    double best = 0;
    std::vector<uint64_t> sums(static_cast<size_t>(pool.size()) * 8, 0);
    for (int r = 0; r < reps; ++r) {
        const auto t = Clock::now();
        pool.parallel_for(static_cast<int64_t>(n), 1 << 18, [&](int64_t b, int64_t e, int th) {
            uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
            int64_t i = b;
            for (; i + 4 <= e; i += 4) {
                s0 += buf[static_cast<size_t>(i)];
                s1 += buf[static_cast<size_t>(i) + 1];
                s2 += buf[static_cast<size_t>(i) + 2];
                s3 += buf[static_cast<size_t>(i) + 3];
            }
            for (; i < e; ++i) s0 += buf[static_cast<size_t>(i)];
            sums[static_cast<size_t>(th) * 8] += s0 + s1 + s2 + s3;
        });
        best = std::max(best, static_cast<double>(n * sizeof(uint64_t)) / secs(t));
    }
    volatile uint64_t sink = 0;
    for (auto s : sums) sink = sink + s;
    return best;
}

double measure_read_bandwidth(cpu::ThreadPool& pool, size_t bytes, int reps) {
    BenchBuffer mem(pool, bytes);
    const size_t n = bytes / sizeof(uint64_t);
    auto* buf = reinterpret_cast<uint64_t*>(mem.data());
    pool.parallel_for(static_cast<int64_t>(n), 1 << 20, [&](int64_t b, int64_t e, int) {
        for (int64_t i = b; i < e; ++i) buf[static_cast<size_t>(i)] = static_cast<uint64_t>(i);
    });
    return read_rate(pool, mem.data(), bytes, reps);
}

PageFaults page_faults() {
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    return {static_cast<int64_t>(ru.ru_minflt), static_cast<int64_t>(ru.ru_majflt)};
}

PageFaults operator-(const PageFaults& a, const PageFaults& b) { return {a.minor - b.minor, a.major - b.major}; }

PhaseTimes decode_weight_bytes(const Model& model) {
    PhaseTimes b{};
    const auto add = [&](Phase p, const GgufTensorInfo* t, double share = 1.0) {
        if (t) b[static_cast<size_t>(p)] += share * static_cast<double>(t->n_bytes);
    };
    const double used = static_cast<double>(model.hp().n_expert_used) / static_cast<double>(model.hp().n_expert);
    for (const LayerWeights& L : model.layers()) {
        add(Phase::AttnProj, L[TensorId::attn_q]);
        add(Phase::AttnProj, L[TensorId::attn_k]);
        add(Phase::AttnProj, L[TensorId::attn_v]);
        add(Phase::AttnOut, L[TensorId::attn_output]);
        add(Phase::SsmProj, L[TensorId::attn_qkv]);
        add(Phase::SsmProj, L[TensorId::attn_gate]);
        add(Phase::SsmProj, L[TensorId::ssm_in]);
        add(Phase::SsmProj, L[TensorId::ssm_ba]);
        add(Phase::SsmOut, L[TensorId::ssm_out]);
        add(Phase::SharedExpert, L[TensorId::ffn_gate_shexp]);
        add(Phase::SharedExpert, L[TensorId::ffn_up_shexp]);
        add(Phase::SharedExpert, L[TensorId::ffn_down_shexp]);
        add(Phase::Router, L[TensorId::ffn_gate_inp]);
        add(Phase::ExpertGateUp, L[TensorId::ffn_gate_exps], used);
        add(Phase::ExpertGateUp, L[TensorId::ffn_up_exps], used);
        add(Phase::ExpertDown, L[TensorId::ffn_down_exps], used);
    }
    add(Phase::LmHead, &model.output());
    return b;
}

EngineBench bench_engine(const Model& model, const SessionOptions& so, int64_t n_prompt, int64_t n_gen) {
    EngineBench b;
    b.n_prompt = n_prompt;
    b.n_gen = n_gen;
    Session s(model, so);
    std::mt19937 rng(1);
    std::vector<int32_t> prompt(static_cast<size_t>(n_prompt));
    for (auto& t : prompt) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(std::min<int64_t>(model.n_vocab(), 1000)));
    std::vector<float> logits;
    s.reset_phase_times();
    PageFaults f0 = page_faults();
    auto t = Clock::now();
    s.eval(prompt, false, logits);
    b.prompt_tok_s = static_cast<double>(n_prompt) / secs(t);
    b.prompt_faults = page_faults() - f0;
    for (size_t p = 0; p < b.prompt_ms.size(); ++p) b.prompt_ms[p] = 1000.0 * s.phase_times()[p];
    s.reset_phase_times();
    f0 = page_faults();
    t = Clock::now();
    for (int64_t i = 0; i < n_gen; ++i) {
        const int32_t tok[1] = {argmax(logits)};
        s.eval(tok, false, logits);
    }
    b.decode_tok_s = static_cast<double>(n_gen) / secs(t);
    b.decode_faults = page_faults() - f0;
    for (size_t p = 0; p < b.decode_ms.size(); ++p) b.decode_ms[p] = 1000.0 * s.phase_times()[p] / static_cast<double>(n_gen);
    b.decode_bytes = decode_weight_bytes(model);
    return b;
}

namespace {

/// Runs `step(i)` for i = 0, 1, ... until `seconds` have passed (at least `min_steps` steps)
/// after one warm-up step; returns the seconds per step.
template <class Step>
double time_steps(double seconds, int min_steps, Step&& step) {
    step(0);
    const auto t = Clock::now();
    int i = 0;
    while (i < min_steps || secs(t) < seconds) step(++i);
    return secs(t) / i;
}

}  // namespace

ExpertGemvBench bench_expert_gemv(const Model& model, cpu::ThreadPool& pool, int steps, int tokens) {
    const ModelHparams& hp = model.hp();
    const int64_t E = hp.n_embd, K = hp.n_expert_used, X = hp.n_expert;
    SessionOptions so;
    const ModelSpec spec = make_model_spec(model, so);
    std::vector<cpu::ExpertWeights> ex;
    for (const LayerWeights& L : model.layers())
        ex.push_back(layer_experts(L, spec.act));
    std::mt19937 rng(3);
    std::normal_distribution<float> nd(0.f, 1.f);
    std::vector<float> h(static_cast<size_t>(tokens * E)), out(h.size());
    for (float& v : h) v = nd(rng);
    std::vector<int32_t> ids(static_cast<size_t>(tokens * K));
    std::vector<float> w(ids.size(), 1.f / static_cast<float>(K));
    cpu::MoeScratch scratch;
    double bytes = 0;
    for (const auto& e : ex) bytes += static_cast<double>(K) * static_cast<double>(e.expert_bytes());
    auto run_step = [&](int step) {
        for (const auto& e : ex) {
            for (int i = 0; i < tokens; ++i)
                for (int64_t j = 0; j < K; ++j)  // cycle: no cache reuse across steps
                    ids[static_cast<size_t>(i * K + j)] = static_cast<int32_t>((static_cast<int64_t>(step) * K + j) % X);
            cpu::moe_ffn(pool, e, h.data(), tokens, static_cast<int>(K), ids.data(), w.data(), nullptr, out.data(), scratch);
        }
    };
    run_step(0);  // warm-up
    const auto t = Clock::now();
    for (int i = 1; i <= steps; ++i) run_step(i);
    const double s = secs(t);
    ExpertGemvBench r;
    r.bytes_per_token = bytes;
    r.ms_per_token = 1000.0 * s / steps;
    r.gb_s = bytes * steps / s / 1e9;
    return r;
}

void fill_random_blocks(cpu::ThreadPool& pool, GgmlType t, uint8_t* data, size_t n, uint64_t seed) {
    const TypeTraits& tt = type_traits(t);
    const size_t bs = tt.type_size;
    const uint16_t d = f32_to_fp16(0.01f), dmin = f32_to_fp16(0.004f);
    constexpr size_t kChunk = size_t{1} << 20;
    const size_t chunk = kChunk / bs * bs;  // whole blocks per chunk
    pool.parallel_for(static_cast<int64_t>((n + chunk - 1) / chunk), 1, [&](int64_t b, int64_t e, int) {
        for (int64_t c = b; c < e; ++c) {
            uint8_t* p = data + static_cast<size_t>(c) * chunk;
            const size_t len = std::min(chunk, n - static_cast<size_t>(c) * chunk);
            uint64_t s = seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(c) * 0xD1B54A32D192ED03ull + 1;
            size_t i = 0;
            for (; i + 8 <= len; i += 8) {
                const uint64_t r = xorshift(s);
                std::memcpy(p + i, &r, 8);
            }
            for (; i < len; ++i) p[i] = static_cast<uint8_t>(xorshift(s));
            for (size_t o = 0; o + bs <= len; o += bs) {
                uint8_t* blk = p + o;
                switch (t) {
                    case GgmlType::MXFP4: blk[0] = static_cast<uint8_t>(110 + blk[0] % 24); break;
                    case GgmlType::Q4_0:
                    case GgmlType::Q5_0:
                    case GgmlType::Q8_0:
                    case GgmlType::IQ4_NL:
                    case GgmlType::IQ4_XS: std::memcpy(blk, &d, 2); break;
                    case GgmlType::Q4_1:
                    case GgmlType::Q5_1:
                    case GgmlType::Q4_K:
                    case GgmlType::Q5_K: std::memcpy(blk, &d, 2), std::memcpy(blk + 2, &dmin, 2); break;
                    case GgmlType::Q2_K: std::memcpy(blk + 80, &d, 2), std::memcpy(blk + 82, &dmin, 2); break;
                    case GgmlType::Q3_K: std::memcpy(blk + 108, &d, 2); break;
                    case GgmlType::Q6_K: std::memcpy(blk + 208, &d, 2); break;
                    case GgmlType::F16: blk[1] &= 0x3B; break;                                          // |x| < 1
                    case GgmlType::BF16: blk[1] = static_cast<uint8_t>((blk[1] & 0x80) | 0x3C); break;  // ~2^-7
                    case GgmlType::F32: blk[3] = static_cast<uint8_t>((blk[3] & 0x80) | 0x3C); break;
                    default: break;
                }
            }
        }
    });
}

std::vector<KernelBenchRow> bench_expert_kernels(cpu::ThreadPool& pool, const KernelBenchOptions& o) {
    std::vector<KernelBenchRow> rows;
    if (o.types.empty() || o.isas.empty() || o.tokens.empty()) return rows;
    const std::string isa_before = cpu::kernel_isa();
    BenchBuffer mem(pool, o.pool_bytes);
    const int K = o.n_used;
    const int max_tokens = *std::max_element(o.tokens.begin(), o.tokens.end());
    cpu::MoeScratch scratch;
    for (GgmlType t : o.types) {
        const int64_t bsz = type_traits(t).block_size;
        // Rounded down to whole blocks (gpt-oss's 2880 is no multiple of 256: K-quants get 2816), at least one.
        const int64_t E = std::max(bsz, o.n_embd / bsz * bsz), F = std::max(bsz, o.n_ff / bsz * bsz);
        const size_t up_bytes = row_size(t, E) * static_cast<size_t>(F), down_bytes = row_size(t, F) * static_cast<size_t>(E);
        const size_t per_expert = 2 * up_bytes + down_bytes;
        const int64_t X = static_cast<int64_t>(o.pool_bytes / per_expert);
        if (X < 2 * K)
            fail(
                "bench: a kernel pool of {} ({} bytes) holds only {} {} experts of {}x{} ({} each); the kernel table needs "
                "at least {} (twice the {} experts per step): raise --kernel-pool",
                format_bytes(o.pool_bytes), o.pool_bytes, X, type_display_name(t), E, F, format_bytes(per_expert), 2 * K, K);
        fill_random_blocks(pool, t, mem.data(), static_cast<size_t>(X) * per_expert, static_cast<uint64_t>(t) + 1);
        GgufTensorInfo gate, up, down;
        gate.name = "bench.ffn_gate_exps", up.name = "bench.ffn_up_exps", down.name = "bench.ffn_down_exps";
        gate.type = up.type = down.type = t;
        gate.n_dims = up.n_dims = down.n_dims = 3;
        gate.ne = up.ne = {E, F, X, 1};
        down.ne = {F, E, X, 1};
        gate.n_bytes = up.n_bytes = up_bytes * static_cast<size_t>(X);
        down.n_bytes = down_bytes * static_cast<size_t>(X);
        gate.data = mem.data();
        up.data = gate.data + gate.n_bytes;
        down.data = up.data + up.n_bytes;
        const cpu::ExpertWeights ex{&gate, &up, &down, nullptr, nullptr, nullptr, FfnAct::Swiglu};
        std::mt19937 rng(5);
        std::normal_distribution<float> nd(0.f, 1.f);
        std::vector<float> h(static_cast<size_t>(max_tokens * E)), out(h.size());
        for (float& v : h) v = nd(rng);
        std::vector<int32_t> ids(static_cast<size_t>(max_tokens * K));
        std::vector<float> w;
        w.assign(ids.size(), 1.f / static_cast<float>(K));  // (GCC 12 warns falsely on the sized constructor here)
        for (const std::string& isa : o.isas) {
            cpu::set_kernel_isa(isa);
            for (int n : o.tokens) {
                // The read probe of this cell: the same threads summing the experts' own memory just
                // before the cell (the host's read bandwidth drifts by tens of percent over minutes
                // on a shared machine, so a probe made once at the start misstates later cells).
                const double probe = read_rate(pool, mem.data(), static_cast<size_t>(X) * per_expert, 2);
                const double s = time_steps(o.seconds, 3, [&](int step) {
                    for (int i = 0; i < n; ++i)
                        for (int j = 0; j < K; ++j)
                            ids[static_cast<size_t>(i * K + j)] = static_cast<int32_t>((static_cast<int64_t>(step) * K + j) % X);
                    cpu::moe_ffn(pool, ex, h.data(), n, K, ids.data(), w.data(), nullptr, out.data(), scratch);
                });
                KernelBenchRow r;
                r.type = t;
                r.isa = isa;
                r.tokens = n;
                r.n_embd = E;
                r.n_ff = F;
                r.bytes_per_step = static_cast<double>(K) * static_cast<double>(per_expert);
                r.ms_per_step = 1000.0 * s;
                r.gb_s = r.bytes_per_step / s / 1e9;
                r.read_gb_s = probe / 1e9;
                rows.push_back(r);
            }
        }
    }
    cpu::set_kernel_isa(isa_before);
    return rows;
}

}  // namespace nitro
