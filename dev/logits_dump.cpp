// A developer tool for restructurings that must not change arithmetic: runs a fixed set of
// evaluations through an engine and writes every logit they return, so the outputs of two builds
// (before and after a change) can be compared byte for byte (dev/compare_logits.sh).
//
//   nitro_logits_dump MODEL OUT.bin [--mode cpu|gpu|hybrid] [--resident F] [--threads N]
//
// Scenarios (token ids are a fixed pseudo-random sequence, so any model with a vocabulary works):
//   1. a 70-token prompt with every row's logits, in chunks of n_ubatch = 16 (several chunks;
//      hybrid: a layer-major group), then 12 greedy decode steps;
//   2. truncation back to 40 positions and 6 more tokens (the recurrent models recompute from a
//      snapshot);
//   3. three sequences in one engine (--parallel): interleaved prompt rows of different lengths in
//      one batch, then 4 rounds of one decode row per sequence in one batch, a truncation of
//      sequence 1 and a last batch.
// --resident F (hybrid): the VRAM budget is chosen so that about F of the experts are resident;
// residency is frozen at the plan's (no adaptive admissions), so a hybrid run is reproducible.
// Prints one line per scenario with the number of logits and their FNV-1a hash.
#include "core/error.h"
#include "runtime/engine.h"
#include "runtime/model.h"

#ifdef NITRO_HAS_CUDA
#include "gpu/gpu_session.h"
#endif

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

using namespace nitro;

namespace {

struct Out {
    std::ofstream f;
    uint64_t h = 1469598103934665603ull, n = 0;
    void put(const std::vector<float>& v) {
        f.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
        const auto* p = reinterpret_cast<const uint8_t*>(v.data());
        for (size_t i = 0; i < v.size() * sizeof(float); ++i) h = (h ^ p[i]) * 1099511628211ull;
        n += v.size();
    }
    void report(const char* what) {
        std::printf("%-34s %10llu logits  fnv %016llx\n", what, static_cast<unsigned long long>(n), static_cast<unsigned long long>(h));
        h = 1469598103934665603ull;
        n = 0;
    }
};

std::vector<int32_t> ids(int64_t n, int64_t n_vocab, uint32_t seed) {
    std::vector<int32_t> v(static_cast<size_t>(n));
    uint32_t x = seed;
    for (auto& t : v) {
        x = x * 1664525u + 1013904223u;
        t = static_cast<int32_t>((x >> 8) % static_cast<uint32_t>(std::min<int64_t>(n_vocab, 1 << 24)));
    }
    return v;
}

int32_t argmax(const float* l, int64_t n) { return static_cast<int32_t>(std::max_element(l, l + n) - l); }

#ifdef NITRO_HAS_CUDA
/// The budget (GiB) whose plan makes about `fraction` of the experts resident (as tests/cuda/test_hybrid.cpp).
double budget_for(const Model& model, const SessionOptions& so, double fraction) {
    GpuOptions big;
    big.progress = false;
    big.mode = EngineMode::Hybrid;
    big.vram_budget_gib = 8;
    cuda::GpuSession probe(model, so, big);
    const Plan& all = probe.plan();
    const uint64_t fixed = all.dense_bytes + all.expert_biases_bytes + all.kv_bytes + all.compute_bytes + all.overhead_bytes +
                           all.group_bytes;
    uint64_t stage = 0;
    if (fraction < 1.0) stage = vram_alloc_size(4 * all.expert_bytes + 4096 + static_cast<uint64_t>(all.n_expert) * 4) + (2 << 20);
    const double bytes = static_cast<double>(fixed + stage) + static_cast<double>(all.n_layer * 3 * 256 + (2 << 20)) +
                         (static_cast<double>(all.n_experts()) * fraction + 0.5) * static_cast<double>(all.expert_bytes);
    return bytes / (1024.0 * 1024.0 * 1024.0);
}
#endif

std::unique_ptr<Engine> engine(const Model& m, const SessionOptions& so, EngineMode mode, double resident) {
    GpuOptions go;
    go.progress = false;
    go.mode = mode;
    // Frozen residency: adaptive admissions land when their copies complete, so which experts the
    // GPU computes at a step (and so the last bits of the logits) can differ from run to run; the
    // plan's residency alone is the same every run. (Before: the device run of 2026-12-08 saw the
    // hybrid decode of one tiny model differ between an old and a new build with admissions on.)
    go.adapt.refresh_every = 0;
#ifdef NITRO_HAS_CUDA
    if (mode == EngineMode::Hybrid) go.vram_budget_gib = budget_for(m, so, resident);
#else
    (void)resident;
#endif
    return make_engine(mode, m, so, go);
}

}  // namespace

int main(int argc, char** argv) {
#ifdef NITRO_HAS_CUDA
    cuda::register_engine();
#endif
    if (argc < 3) {
        std::fprintf(stderr, "usage: %s MODEL OUT.bin [--mode cpu|gpu|hybrid] [--resident F] [--threads N]\n", argv[0]);
        return 2;
    }
    try {
        const std::string path = argv[1];
        EngineMode mode = EngineMode::Cpu;
        double resident = 0.5;
        int threads = 2;
        for (int i = 3; i + 1 < argc; i += 2) {
            const std::string k = argv[i], v = argv[i + 1];
            if (k == "--mode") mode = parse_engine_mode(v);
            else if (k == "--resident") resident = std::stod(v);
            else if (k == "--threads") threads = std::stoi(v);
            else fail("unknown option {}", k);
        }
        Model model(path);
        const int64_t V = model.n_vocab();
        Out out;
        out.f.open(argv[2], std::ios::binary);
        if (!out.f) fail("cannot write {}", argv[2]);
        std::vector<float> l;
        {
            SessionOptions so;
            so.n_ctx = 256;
            so.n_ubatch = 16;
            so.n_threads = threads;
            auto e = engine(model, so, mode, resident);
            std::printf("engine: %s\n", e->describe().c_str());
            const auto prompt = ids(70, V, 1);
            e->eval(prompt, true, l);
            out.put(l);
            int32_t t = argmax(l.data() + (l.size() - static_cast<size_t>(V)), V);
            for (int s = 0; s < 12; ++s) {
                e->eval(std::span<const int32_t>(&t, 1), false, l);
                out.put(l);
                t = argmax(l.data(), V);
            }
            out.report("prompt 70 + 12 decode");
            e->truncate(40);
            const auto more = ids(6, V, 2);
            e->eval(more, true, l);
            out.put(l);
            out.report("truncate to 40 + 6");
        }
        {
            SessionOptions so;
            so.n_ctx = 128;
            so.n_ubatch = 16;
            so.n_threads = threads;
            so.n_seq = 3;
            auto e = engine(model, so, mode, resident);
            const auto a = ids(5, V, 3), b = ids(9, V, 4), c = ids(3, V, 5);
            std::vector<int32_t> tok, seq;
            std::vector<uint8_t> want;
            size_t ia = 0, ib = 0, ic = 0;
            while (ia < a.size() || ib < b.size() || ic < c.size()) {
                if (ib < b.size()) tok.push_back(b[ib++]), seq.push_back(1);
                if (ia < a.size()) tok.push_back(a[ia++]), seq.push_back(0);
                if (ib < b.size()) tok.push_back(b[ib++]), seq.push_back(1);
                if (ic < c.size()) tok.push_back(c[ic++]), seq.push_back(2);
            }
            want.assign(tok.size(), 1);
            e->eval_batch(SeqBatch{tok, seq, want}, l);
            out.put(l);
            for (int r = 0; r < 4; ++r) {
                std::vector<int32_t> t3(3), s3 = {2, 0, 1};
                for (int q = 0; q < 3; ++q) t3[static_cast<size_t>(q)] = argmax(l.data() + static_cast<size_t>(q) * static_cast<size_t>(V), V);
                std::vector<uint8_t> w3(3, 1);
                if (r == 0) {  // the first batch's logits are per row: take each sequence's last row
                    for (int q = 0; q < 3; ++q) {
                        size_t last = 0;
                        for (size_t i = 0; i < seq.size(); ++i)
                            if (seq[i] == s3[static_cast<size_t>(q)]) last = i;
                        t3[static_cast<size_t>(q)] = argmax(l.data() + last * static_cast<size_t>(V), V);
                    }
                }
                e->eval_batch(SeqBatch{t3, s3, w3}, l);
                out.put(l);
            }
            e->seq_truncate(1, 6);
            const auto d = ids(4, V, 6);
            std::vector<int32_t> s4 = {1, 1, 0, 1}, t4 = {d[0], d[1], d[2], d[3]};
            std::vector<uint8_t> w4(4, 1);
            e->eval_batch(SeqBatch{t4, s4, w4}, l);
            out.put(l);
            out.report("3 sequences, batches, truncate");
        }
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
}
