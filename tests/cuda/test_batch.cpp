// GpuSession::eval_batch (nitro serve --parallel N on the GPU engines), label cuda. Four
// sequences in one engine, their prompts in interleaved pieces and their decode steps in varying
// subsets (one row alone: the sequence's captured decode graph), a truncation in the middle, then
// one batch of more rows than the GEMV path takes. Each batch row's logits are compared with
//   (1) the same tokens evaluated alone, chunk for chunk, in a one-sequence GpuSession (eval):
//       BIT FOR BIT while every batch has at most kGemvMaxTokens (8) rows: the GEMV kernels compute
//       each row with the same arithmetic whatever the row count, the MoE decode kernels work per
//       (row, expert), and attention and the DeltaNet recurrence run per sequence with the split
//       of a sequence alone. From the batch of more rows on (GEMM path: activations rounded to f16,
//       cuBLAS's rounding depends on the row count, and a router near-tie may then pick another
//       expert) the bounds are the distribution bounds below: top-5 probabilities within 0.15
//       everywhere, within kProbTol (0.03) at all but one row in ten, the argmax equal where the
//       margin is >= kMargin but at one row;
//   (2) the CPU Session running the same batches (n_seq 4): the distribution bounds the other
//       model tests use for random synth models (tests/cuda/test_qwen3next.cpp).
// On the embedded model, a synth gpt-oss and a synth qwen3next (recurrent state per sequence, with
// snapshots), GPU-all and hybrid (--n-cpu-moe: half the layers' experts on the CPU; frozen
// residency, so both engines place every expert alike).
#include "arch/synth.h"
#include "core/error.h"
#include "gpu/gpu_session.h"
#include "cuda/ops.h"
#include "cuda_test_util.h"
#include "model_compare.h"
#include "runtime/default_model.h"
#include "runtime/session.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>

using namespace nitro;
using namespace nitro::cuda::test;

namespace {

constexpr int kSeqs = 4;

/// One eval_batch call, or (rows empty) a truncation of sequence trunc_seq to trunc_len.
struct Step {
    std::vector<int32_t> tok, seq;
    std::vector<uint8_t> want;
    int trunc_seq = -1;
    int64_t trunc_len = 0;
};

/// The schedule: prompt pieces interleaved (batches of <= 8 rows), decode steps of subsets, a
/// truncation of sequence 1, then (big = true) one batch with a 20-row prompt piece and more steps.
std::vector<Step> schedule(int64_t n_vocab, size_t* first_big) {
    std::vector<Step> st;
    auto tok = [&] { return randint(0, static_cast<int>(n_vocab) - 1); };
    auto piece = [&](Step& s, int q, int n) {  // n rows of sequence q, logits on the last
        for (int i = 0; i < n; ++i) {
            s.tok.push_back(tok());
            s.seq.push_back(q);
            s.want.push_back(i + 1 == n);
        }
    };
    auto interleave = [](Step& s) {  // rows of different sequences mixed, each sequence's in order
        Step o;
        std::vector<size_t> next(kSeqs, 0);
        std::vector<std::vector<size_t>> rows(kSeqs);
        for (size_t i = 0; i < s.seq.size(); ++i) rows[static_cast<size_t>(s.seq[i])].push_back(i);
        for (size_t k = 0; k < s.seq.size();) {
            const int q = randint(0, kSeqs - 1);
            if (next[static_cast<size_t>(q)] == rows[static_cast<size_t>(q)].size()) continue;
            const size_t i = rows[static_cast<size_t>(q)][next[static_cast<size_t>(q)]++];
            o.tok.push_back(s.tok[i]);
            o.seq.push_back(s.seq[i]);
            o.want.push_back(s.want[i]);
            ++k;
        }
        s = o;
    };
    {
        Step s;
        piece(s, 1, 3);
        piece(s, 0, 3);
        interleave(s);
        st.push_back(s);
    }
    {
        Step s;
        piece(s, 2, 4);
        piece(s, 0, 2);
        piece(s, 3, 2);
        interleave(s);
        st.push_back(s);
    }
    {
        Step s;
        piece(s, 1, 5);
        piece(s, 3, 3);
        interleave(s);
        st.push_back(s);
    }
    auto decode = [&](std::vector<int> qs) {
        Step s;
        for (int q : qs) piece(s, q, 1);
        interleave(s);
        st.push_back(s);
    };
    decode({0, 1, 2, 3});
    decode({2});  // one row: sequence 2's decode graph
    decode({3, 0});
    decode({1, 2, 3});
    decode({0});
    decode({0});  // the graph again, replayed
    {
        Step s;  // a truncation: sequence 1 back to 6 of its 10 positions (recurrent: restore and redo)
        s.trunc_seq = 1;
        s.trunc_len = 6;
        st.push_back(s);
    }
    decode({1, 2});
    decode({0, 1, 2, 3});
    {
        Step s;  // a prompt piece and a decode row in one batch
        piece(s, 1, 4);
        piece(s, 2, 1);
        interleave(s);
        st.push_back(s);
    }
    decode({1, 3});
    *first_big = st.size();
    {
        Step s;  // more rows than the GEMV path takes: 20 of sequence 3, one of each other
        piece(s, 3, 20);
        piece(s, 0, 1);
        piece(s, 1, 1);
        piece(s, 2, 1);
        interleave(s);
        st.push_back(s);
    }
    decode({0, 1, 2, 3});
    decode({3});
    decode({1, 2});
    return st;
}

/// Logits of every wanted row of every step, in batch order, from an engine running the batches.
std::vector<std::vector<float>> run_batches(Engine& e, const std::vector<Step>& steps) {
    std::vector<std::vector<float>> out;
    for (const Step& s : steps) {
        if (s.trunc_seq >= 0) {
            e.seq_truncate(s.trunc_seq, s.trunc_len);
            out.emplace_back();
            continue;
        }
        std::vector<float> l;
        e.eval_batch(SeqBatch{s.tok, s.seq, s.want}, l);
        out.push_back(std::move(l));
    }
    return out;
}

/// The same tokens run alone, sequence by sequence, in a one-sequence GPU engine: per step, the
/// logits of the wanted rows in batch order (each sequence's piece of a step is one eval).
std::vector<std::vector<float>> run_alone(cuda::GpuSession& g, const std::vector<Step>& steps, int64_t V) {
    std::vector<std::vector<float>> out(steps.size());
    for (size_t k = 0; k < steps.size(); ++k) {
        size_t wanted = 0;
        for (uint8_t w : steps[k].want) wanted += w;
        out[k].assign(wanted * static_cast<size_t>(V), NAN);
    }
    for (int q = 0; q < kSeqs; ++q) {
        g.truncate(0);
        for (size_t k = 0; k < steps.size(); ++k) {
            const Step& s = steps[k];
            if (s.trunc_seq >= 0) {
                if (s.trunc_seq == q) g.truncate(s.trunc_len);
                continue;
            }
            std::vector<int32_t> piece;
            std::vector<size_t> out_row;  // the wanted rows of this piece: their index among the step's wanted rows
            size_t w = 0;
            for (size_t i = 0; i < s.tok.size(); ++i) {
                if (s.seq[i] == q) {
                    if (s.want[i]) out_row.push_back(w);
                    else out_row.push_back(SIZE_MAX);
                    piece.push_back(s.tok[i]);
                }
                w += s.want[i];
            }
            if (piece.empty()) continue;
            std::vector<float> l;
            const bool all = piece.size() > 1;  // one row: a decode step (the CUDA graph)
            g.eval(piece, all, l);
            for (size_t r = 0; r < piece.size(); ++r) {
                if (out_row[r] == SIZE_MAX) continue;
                const float* src = all ? &l[r * static_cast<size_t>(V)] : l.data();
                std::memcpy(&out[k][out_row[r] * static_cast<size_t>(V)], src, static_cast<size_t>(V) * 4);
            }
        }
    }
    return out;
}

struct Agreement {
    int positions = 0, checked = 0, missed = 0, over = 0;
    double worst = 0;
    void add(const float* ref, const float* got, int64_t V) {
        const Top c = top_of(ref, V), g = top_of(got, V);
        ++positions;
        if (c.margin >= kMargin) {
            ++checked;
            missed += c.best != g.best;
        }
        double dp = 0;
        for (auto [id, pc] : c.top5) dp = std::max(dp, std::abs(prob_of(got, V, id) - pc));
        worst = std::max(worst, dp);
        over += dp > kProbTol;
    }
};

void batch_matches(const Model& model, const std::string& what, EngineMode mode) {
    SCOPED_TRACE(what + (mode == EngineMode::Gpu ? " gpu" : " hybrid"));
    const int64_t V = model.n_vocab();
    size_t first_big = 0;
    const std::vector<Step> steps = schedule(V, &first_big);
    SessionOptions so;
    so.n_threads = 2;
    so.n_ctx = 256;
    so.n_ubatch = 64;
    GpuOptions go;
    go.progress = false;
    go.mode = mode;
    if (mode == EngineMode::Hybrid) {
        go.n_cpu_moe = static_cast<int>(model.hp().n_layer / 2);
        go.adapt.refresh_every = 0;  // frozen: the batch and the reference place every expert alike
    }

    SessionOptions so4 = so;
    so4.n_seq = kSeqs;
    std::vector<std::vector<float>> batch;
    {
        cuda::GpuSession gpu(model, so4, go);
        ASSERT_EQ(gpu.n_seq(), kSeqs);
        if (mode == EngineMode::Hybrid) {
            ASSERT_EQ(gpu.plan().mode(), "hybrid");
        }
        // A bad batch is refused and changes nothing.
        const int32_t t1[2] = {1, 2}, q1[2] = {0, kSeqs};
        std::vector<float> l;
        EXPECT_THROW(gpu.eval_batch(SeqBatch{t1, q1, {}}, l), Error);
        EXPECT_EQ(gpu.seq_n_past(0), 0);
        batch = run_batches(gpu, steps);
        if (mode == EngineMode::Hybrid) {
            EXPECT_GT(gpu.expert_counters()->total().cpu_pairs, 0u) << "no expert ran on the CPU";
        }
        for (int q = 0; q < kSeqs; ++q) {
            int64_t n = 0;
            for (const Step& s : steps) {
                if (s.trunc_seq == q) n = s.trunc_len;
                for (int32_t r : s.seq) n += r == q;
            }
            EXPECT_EQ(gpu.seq_n_past(q), n) << "sequence " << q;
        }
        // The plan counted a K/V region per sequence.
        GpuOptions one = go;
        cuda::GpuSession g1(model, so, one);
        EXPECT_GT(gpu.plan().kv_bytes, g1.plan().kv_bytes);
    }
    std::vector<std::vector<float>> alone;
    {
        cuda::GpuSession g1(model, so, go);
        alone = run_alone(g1, steps, V);
    }
    std::vector<std::vector<float>> cpu;
    {
        Session c(model, so4);
        for (const Step& s : steps) {
            if (s.trunc_seq >= 0) {
                c.seq_truncate(s.trunc_seq, s.trunc_len);
                cpu.emplace_back();
                continue;
            }
            std::vector<float> l;
            c.eval_batch(SeqBatch{s.tok, s.seq, s.want}, l);
            cpu.push_back(std::move(l));
        }
    }
    ASSERT_EQ(batch.size(), steps.size());
    int exact_rows = 0, exact_equal = 0;
    Agreement vs_alone, vs_cpu;
    for (size_t k = 0; k < steps.size(); ++k) {
        ASSERT_EQ(batch[k].size(), alone[k].size()) << "step " << k;
        ASSERT_EQ(batch[k].size(), cpu[k].size()) << "step " << k;
        const size_t rows = batch[k].size() / static_cast<size_t>(V);
        for (size_t r = 0; r < rows; ++r) {
            const float* b = &batch[k][r * static_cast<size_t>(V)];
            const float* a = &alone[k][r * static_cast<size_t>(V)];
            if (k < first_big) {
                ++exact_rows;
                const bool eq = std::memcmp(a, b, static_cast<size_t>(V) * 4) == 0;
                exact_equal += eq;
                EXPECT_TRUE(eq) << "step " << k << " row " << r << ": batch logits differ from the sequence evaluated alone";
            } else {
                vs_alone.add(a, b, V);
            }
            vs_cpu.add(&cpu[k][r * static_cast<size_t>(V)], b, V);
        }
    }
    std::printf("%s %s: %d/%d rows bit-identical to the sequence alone; after the big batch: %d rows, max top-5 |dp| %.4f vs "
                "alone; vs CPU: %d rows, argmax checked %d (%d differ), max top-5 |dp| %.4f, %d above %.2f\n",
                what.c_str(), engine_mode_name(mode), exact_equal, exact_rows, vs_alone.positions, vs_alone.worst, vs_cpu.positions,
                vs_cpu.checked, vs_cpu.missed, vs_cpu.worst, vs_cpu.over, kProbTol);
    EXPECT_GT(exact_rows, 20);
    EXPECT_GT(vs_alone.positions, 5);
    EXPECT_LE(vs_alone.worst, 0.15) << "GEMM-path batch vs the sequence alone";
    // The big batch's rows take the prompt paths (integer GEMM, flash attention), the rows alone the
    // decode kernels: they round differently, as GPU and CPU do, for which the bound below is 10%
    // of the positions; with ~11 positions that is one, and the embedded model's router near-ties
    // (a third of its positions) give a second now and then (MEASURED: 2 of 11 above 0.03, max
    // 0.059, seed 15962385267799209382).
    EXPECT_LE(vs_alone.over, std::max(2.0, 0.10 * vs_alone.positions));
    EXPECT_LE(vs_alone.missed, 1);
    // Against the CPU: the bounds of tests/cuda/test_qwen3next.cpp (random synth weights).
    EXPECT_LE(vs_cpu.worst, 0.15);
    EXPECT_LE(vs_cpu.missed, std::max(1.0, 0.03 * vs_cpu.checked));
    EXPECT_LE(vs_cpu.over, 0.10 * vs_cpu.positions);
}

std::string synth(const char* arch, const char* tag) {
    SynthOptions o;
    o.arch = arch;
    o.preset = "tiny";
    o.dense_type = GgmlType::Q8_0;
    o.seed = static_cast<uint64_t>(randint(1, 1 << 30));
    o.out = (std::filesystem::temp_directory_path() / (std::string("nitro-cuda-batch-") + tag + ".gguf")).string();
    synth_model(o);
    return o.out;
}

}  // namespace

TEST(CudaBatch, EmbeddedModelRowsEqualTheirSequenceAlone) {
    require_gpu();
    Model model(default_model_path());
    batch_matches(model, "embedded", EngineMode::Gpu);
    batch_matches(model, "embedded", EngineMode::Hybrid);
}

TEST(CudaBatch, SynthGptOssRowsEqualTheirSequenceAlone) {
    require_gpu();
    const std::string path = synth("gpt-oss", "gptoss");
    {
        Model model(path);
        batch_matches(model, "synth gpt-oss", EngineMode::Gpu);
        batch_matches(model, "synth gpt-oss", EngineMode::Hybrid);
    }
    std::filesystem::remove(path);
}

TEST(CudaBatch, SynthQwen3NextRowsEqualTheirSequenceAlone) {
    require_gpu();
    const std::string path = synth("qwen3next", "qwen3next");
    {
        Model model(path);
        batch_matches(model, "synth qwen3next", EngineMode::Gpu);
        batch_matches(model, "synth qwen3next", EngineMode::Hybrid);
    }
    std::filesystem::remove(path);
}

TEST(CudaBatch, SequencesHaveTheirOwnRecurrentSnapshots) {
    // qwen3next: a multi-row batch snapshots each sequence that had several rows, at its own
    // position; truncating one sequence leaves the others' positions and snapshots alone.
    require_gpu();
    const std::string path = synth("qwen3next", "qwen3next-snap");
    {
        Model model(path);
        SessionOptions so;
        so.n_threads = 2;
        so.n_ctx = 128;
        so.n_seq = 3;
        GpuOptions go;
        go.progress = false;
        cuda::GpuSession gpu(model, so, go);
        const int32_t tok[7] = {5, 6, 7, 8, 9, 10, 11}, seq[7] = {0, 2, 0, 2, 2, 0, 1};
        std::vector<float> l;
        gpu.eval_batch(SeqBatch{tok, seq, {}}, l);
        EXPECT_TRUE(l.empty());
        EXPECT_EQ(gpu.seq_checkpoints(0), std::vector<int64_t>{3});
        EXPECT_EQ(gpu.seq_checkpoints(1), std::vector<int64_t>{});  // one row: a decode step takes none
        EXPECT_EQ(gpu.seq_checkpoints(2), std::vector<int64_t>{3});
        gpu.seq_truncate(2, 1);
        EXPECT_EQ(gpu.seq_n_past(2), 1);
        EXPECT_EQ(gpu.seq_n_past(0), 3);
        EXPECT_EQ(gpu.seq_n_past(1), 1);
        EXPECT_EQ(gpu.seq_checkpoints(0), std::vector<int64_t>{3});
        EXPECT_THROW(gpu.seq_truncate(1, 2), Error);
        EXPECT_THROW(gpu.seq_n_past(3), Error);
    }
    std::filesystem::remove(path);
}
