// Prompt chunks in hybrid placement (issue 14, docs/hybrid.md "Prompts"): per MoE layer, the
// chunk's (token, expert) pairs grouped by expert; resident experts from their slots, every other
// expert either staged over PCIe into a scratch slot for a GPU GEMM (gpu/prefill_stager.h) or
// computed by the CPU straight from the mapped file, as the cost model (runtime/prefill_cost.h)
// decides on rates measured at start-up. The CPU share runs on its own thread while this thread
// feeds the staging pipeline; the combine adds both in router order.
#include "core/error.h"
#include "gpu/gpu_session_impl.h"

#include "core/mapped_file.h"
#include "quant/types.h"

#include <fmt/format.h>

#include <array>
#include <cstdio>
#include <exception>
#include <thread>

namespace nitro::cuda {

namespace {

/// The three parts (gate, up, down matrices) of expert e in the mapped file.
std::array<PrefillStager::Part, 3> expert_parts(const cpu::ExpertWeights& w, int e) {
    std::array<PrefillStager::Part, 3> p;
    const GgufTensorInfo* t[3] = {w.gate, w.up, w.down};
    for (int i = 0; i < 3; ++i) {
        const size_t bytes = row_size(t[i]->type, t[i]->ne[0]) * static_cast<size_t>(t[i]->ne[1]);
        p[static_cast<size_t>(i)] = {t[i]->data + static_cast<size_t>(e) * bytes, bytes};
    }
    return p;
}

/// FLOPs of one token through one expert: 2 x (gate + up + down weights).
double flop_per_row(const cpu::ExpertWeights& w) {
    return 2.0 * static_cast<double>(w.gate->ne[0] * w.gate->ne[1] + w.up->ne[0] * w.up->ne[1] + w.down->ne[0] * w.down->ne[1]);
}

}  // namespace

void GpuSession::Impl::setup_prompt_staging(DeviceContext& ctx, const GpuOptions& go) {
    stager.reset();
    prompt_pool.reset();
    rates = PrefillRates{};
    rates_measured = false;
    prefill_mode = go.prefill_mode;
    if (plan.stage_slots <= 0 || prefill_mode == PrefillCostMode::Cpu || spec.n_ubatch <= kGemvMaxTokens || !hybrid) return;
    // The plan reserved stage_bytes for the slots and the expert table, one arena.
    ctx.alloc().begin_arena(plan.stage_bytes, "prompt staging");
    // The fill team: the engine's threads (-t) unless --prefill-stage-threads says otherwise; half
    // of it beside a CPU share, which then runs on the other threads.
    const int threads = pool->size();
    const int fill_threads = go.prefill_stage_threads > 0 ? go.prefill_stage_threads : threads;
    fill_split_threads = std::max(1, fill_threads / 2);
    prompt_pool = std::make_unique<cpu::ThreadPool>(std::max(1, threads - fill_split_threads));
    stager = std::make_unique<PrefillStager>(ctx.alloc(), plan.stage_slot_bytes, plan.stage_slots, go.prefill_stage_buffers,
                                             fill_threads, go.test_max_pinned_stage_buffers);
    d_gpu_of = ctx.alloc_n<int32_t>(static_cast<size_t>(X), "prompt expert table");
    ctx.alloc().end_arena();
    if (!h_gpu_of) {
        void* unused = nullptr;
        h_gpu_of = static_cast<int32_t*>(ctx.host_mapped(layers.size() * static_cast<size_t>(X) * 4, &unused));
    }
    setup_prompt_groups(ctx);

    // ---- rates for the cost model, MEASURED now on this machine (about 0.1-0.3 s).
    // A layer with experts on the CPU and its non-resident experts (cold in the caches).
    int lm = -1;
    for (int il = static_cast<int>(layers.size()) - 1; il >= 0 && lm < 0; --il)
        if (layers[static_cast<size_t>(il)].cpu_part) lm = il;
    if (lm < 0) return;
    const Layer& D = layers[static_cast<size_t>(lm)];
    const cpu::ExpertWeights& W = experts[static_cast<size_t>(lm)];
    std::vector<int32_t> off;
    for (int32_t e = static_cast<int32_t>(X) - 1; e >= 0; --e)
        if (D.h_slot_of[static_cast<size_t>(e)] < 0) off.push_back(e);
    auto pick = [&](size_t i) { return off[i % off.size()]; };
    const uint64_t eb = W.expert_bytes();
    const double fpr = flop_per_row(W);
    // PCIe: the staging path's own copy (pinned buffer -> slot).
    rates.pcie_gb_s = stager->measure_copy_gb_s(plan.stage_slot_bytes);
    // Fill: whole experts from the file into a buffer, as stage() fills them: by the whole team
    // (alone), then by the part of it that runs beside a CPU share (distinct experts each time,
    // cold in the caches; one expert first as a warm-up of the team).
    auto fill_rate = [&](size_t first, int team) {
        std::vector<std::vector<PrefillStager::Part>> samples;
        for (size_t i = 0; i < 4; ++i) {
            const auto p = expert_parts(W, pick(first + i));
            samples.emplace_back(p.begin(), p.end());
        }
        return stager->measure_fill_gb_s(samples, team);
    };
    // Each rate is the better of two samples: one sample of 4 experts read 19 GB/s where the runs
    // around it read 45 (a noisy host, MEASURED 2026-12-03), and sent 729 experts to the CPU.
    (void)fill_rate(0, 0);
    rates.fill_alone_gb_s = std::max(fill_rate(4, 0), fill_rate(8, 0));
    rates.fill_gb_s = std::max(fill_rate(12, fill_split_threads), fill_rate(16, fill_split_threads));
    const size_t used = 20;  // experts the fill measurements read
    // CPU: one token through K experts (reads dominate: DRAM rate), then 64 tokens through K others
    // (the rest is arithmetic).
    {
        const int k = static_cast<int>(K);
        const int64_t n = 64;
        std::vector<float> hid(static_cast<size_t>(n * E));
        for (size_t i = 0; i < hid.size(); ++i) hid[i] = 0.01f * static_cast<float>(static_cast<int>(i % 13) - 6);
        std::vector<int32_t> ids(static_cast<size_t>(n * k));
        std::vector<float> w(static_cast<size_t>(n * k), 1.0f / static_cast<float>(k));
        std::vector<uint8_t> skip(static_cast<size_t>(X), 0);
        std::vector<float> out(static_cast<size_t>(n * E));
        for (int j = 0; j < k; ++j) ids[static_cast<size_t>(j)] = pick(used + static_cast<size_t>(j));
        auto t0 = Clock::now();
        cpu::moe_ffn(*prompt_pool, W, hid.data(), 1, k, ids.data(), w.data(), skip.data(), out.data(), cpu_scratch);
        const double t1 = ms_since(t0);
        for (int64_t t = 0; t < n; ++t)
            for (int j = 0; j < k; ++j) ids[static_cast<size_t>(t * k + j)] = pick(used + static_cast<size_t>(k + j));
        t0 = Clock::now();
        cpu::moe_ffn(*prompt_pool, W, hid.data(), n, k, ids.data(), w.data(), skip.data(), out.data(), cpu_scratch);
        const double tn = ms_since(t0);
        rates.dram_gb_s = t1 > 0 ? static_cast<double>(k) * static_cast<double>(eb) / (t1 * 1e6) : 0;
        const double read_ms = rates.dram_gb_s > 0 ? static_cast<double>(k) * static_cast<double>(eb) / (rates.dram_gb_s * 1e6) : 0;
        rates.cpu_gflop_s = static_cast<double>(n * k) * fpr / (std::max(tn - read_ms, 0.1 * tn) * 1e6);
    }
    // GPU: one staged expert's GEMMs over min(256, ubatch) rows (dequantisation included).
    {
        const int64_t n = std::min<int64_t>(256, spec.n_ubatch);
        std::vector<int32_t> ids(static_cast<size_t>(n * K));
        for (int64_t t = 0; t < n; ++t)
            for (int64_t j = 0; j < K; ++j) ids[static_cast<size_t>(t * K + j)] = static_cast<int32_t>(j);
        cudaStream_t cs = ctx.compute();
        NITRO_CUDA_CHECK(cudaMemsetAsync(h, 0, static_cast<size_t>(n * E) * 4, cs));
        hq = Q8Input{};  // (h rewritten)
        MoePrefillGroups g;
        moe_prefill_begin(cs, D.ex, h, n, E, static_cast<int>(K), ids.data(), moe_sc, g);
        const auto parts = expert_parts(W, pick(0));
        cudaEvent_t a = nullptr, b = nullptr;
        NITRO_CUDA_CHECK(cudaEventCreate(&a));
        NITRO_CUDA_CHECK(cudaEventCreate(&b));
        float best = 0;
        for (int rep = 0; rep < 2; ++rep) {
            const uint8_t* base = stager->stage(parts, nullptr, cs);
            NITRO_CUDA_CHECK(cudaEventRecord(a, cs));
            moe_prefill_expert(cs, D.ex, g, 0, base + PrefillStager::part_offset(parts, 0), base + PrefillStager::part_offset(parts, 1),
                               base + PrefillStager::part_offset(parts, 2), moe_sc);
            NITRO_CUDA_CHECK(cudaEventRecord(b, cs));
            stager->release(cs);
            NITRO_CUDA_CHECK(cudaEventSynchronize(b));
            NITRO_CUDA_CHECK(cudaEventElapsedTime(&best, a, b));
        }
        rates.gpu_gflop_s = best > 0 ? static_cast<double>(n) * fpr / (static_cast<double>(best) * 1e6) : 0;
        // Resident experts run as one grouped GEMM over all of them, far better occupied than one
        // small expert alone: up to 16 of this layer's resident experts, about 256 rows each.
        std::vector<int32_t> res;
        for (int64_t e = 0; e < X && res.size() < 16; ++e)
            if (D.h_slot_of[static_cast<size_t>(e)] >= 0) res.push_back(static_cast<int32_t>(e));
        if (res.size() >= static_cast<size_t>(K)) {
            const int64_t m = static_cast<int64_t>(res.size());
            const int64_t ng = std::min<int64_t>(spec.n_ubatch, std::max<int64_t>(1, 256 * m / K));
            std::vector<int32_t> gids(static_cast<size_t>(ng * K));
            for (int64_t i = 0; i < ng * K; ++i) gids[static_cast<size_t>(i)] = res[static_cast<size_t>(i % m)];  // distinct per token
            MoePrefillGroups gg;
            moe_prefill_begin(cs, D.ex, h, ng, E, static_cast<int>(K), gids.data(), moe_sc, gg);
            for (int rep = 0; rep < 2; ++rep) {
                NITRO_CUDA_CHECK(cudaEventRecord(a, cs));
                moe_prefill_resident(cs, D.ex, gg, D.h_slot_of.data(), moe_sc);
                NITRO_CUDA_CHECK(cudaEventRecord(b, cs));
                NITRO_CUDA_CHECK(cudaEventSynchronize(b));
                NITRO_CUDA_CHECK(cudaEventElapsedTime(&best, a, b));
            }
            rates.gpu_grouped_gflop_s = best > 0 ? static_cast<double>(ng * K) * fpr / (static_cast<double>(best) * 1e6) : 0;
        }
        cudaEventDestroy(a);
        cudaEventDestroy(b);
        stager->take_gpu_wait_ms();
        stager->reset_stats();
    }
    pin_in_place(go.prefill_pin_gib);
    rates_measured = rates.pcie_gb_s > 0 && rates.fill_gb_s > 0 && rates.fill_alone_gb_s > 0 && rates.dram_gb_s > 0 &&
                     rates.cpu_gflop_s > 0 && rates.gpu_gflop_s > 0;
    if (verbose || !rates_measured)
        std::fprintf(stderr,
                     "prompt staging: %d VRAM slots of %.1f MiB, %d host buffers (%s), %d fill threads (%d beside a CPU share on "
                     "%d), cost model %s; rates MEASURED at start-up: host-to-device %.1f GB/s, fill %.1f GB/s (%.1f beside the CPU "
                     "share), CPU experts %.1f GB/s read + %.0f GFLOP/s, GPU expert GEMMs %.0f GFLOP/s (resident, grouped: "
                     "%.0f)%s\n",
                     stager->n_slots(), plan.stage_slot_bytes / 1048576.0, go.prefill_stage_buffers,
                     stager->pinned() ? "pinned" : "some pageable", fill_threads, fill_split_threads, prompt_pool->size(),
                     prefill_cost_mode_name(prefill_mode), rates.pcie_gb_s, rates.fill_alone_gb_s, rates.fill_gb_s,
                     rates.dram_gb_s, rates.cpu_gflop_s, rates.gpu_gflop_s, rates.gpu_grouped_gflop_s,
                     rates_measured ? "" : " (a rate could not be measured: prompts use the CPU for off-GPU experts)");
}

void GpuSession::Impl::pin_in_place(double gib) {
    if (gib == 0 || !stager) return;
    const bool automatic = gib < 0;
    if (automatic) {  // -1: a bounded share of RAM (prefill_pin_auto_bytes)
        uint64_t off_gpu = 0;
        for (size_t il = 0; il < layers.size(); ++il)
            if (layers[il].cpu_part)
                for (int64_t e = 0; e < X; ++e) off_gpu += layers[il].h_slot_of[static_cast<size_t>(e)] < 0 ? experts[il].expert_bytes() : 0;
        const MemInfo m = read_meminfo();
        gib = static_cast<double>(prefill_pin_auto_bytes(off_gpu, m.total, m.available)) / 1073741824.0;
        if (gib <= 0) return;
    }
    // Layer by layer, the off-GPU experts in id order while the budget holds all three of their
    // parts; in each of the gate, up and down tensors every run of consecutive such experts is one
    // registration of its whole pages (an expert at a run's edge whose part shares a page with a
    // neighbour outside the run keeps the ring).
    const auto t0 = Clock::now();
    const uint64_t budget = static_cast<uint64_t>(gib * 1073741824.0);
    uint64_t used = 0;
    for (size_t il = 0; il < layers.size() && !stager->pin_refused(); ++il) {
        const Layer& D = layers[il];
        if (!D.cpu_part) continue;
        const cpu::ExpertWeights& W = experts[il];
        std::vector<uint8_t> pin(static_cast<size_t>(X), 0);
        for (int64_t e = 0; e < X; ++e) {
            if (D.h_slot_of[static_cast<size_t>(e)] >= 0) continue;
            if (used + W.expert_bytes() > budget) break;
            pin[static_cast<size_t>(e)] = 1;
            used += W.expert_bytes();
        }
        for (const GgufTensorInfo* t : {W.gate, W.up, W.down}) {
            const size_t per = row_size(t->type, t->ne[0]) * static_cast<size_t>(t->ne[1]);  // one expert's part
            for (int64_t e = 0; e < X && !stager->pin_refused();) {
                if (!pin[static_cast<size_t>(e)]) {
                    ++e;
                    continue;
                }
                int64_t end = e;
                while (end < X && pin[static_cast<size_t>(end)]) ++end;
                stager->pin_in_place(t->data + static_cast<size_t>(e) * per, static_cast<size_t>(end - e) * per);
                e = end;
            }
        }
    }
    int64_t n_in_place = 0;
    for (size_t il = 0; il < layers.size(); ++il) {
        Layer& D = layers[il];
        if (!D.cpu_part) continue;
        D.in_place.assign(static_cast<size_t>(X), 0);
        for (int64_t e = 0; e < X; ++e) {
            D.in_place[static_cast<size_t>(e)] = stager->in_place(expert_parts(experts[il], static_cast<int32_t>(e))) ? 1 : 0;
            n_in_place += D.h_slot_of[static_cast<size_t>(e)] < 0 && D.in_place[static_cast<size_t>(e)];
        }
    }
    std::fprintf(stderr,
                 "prompt staging: %.2f GiB of the model file pinned in place (--prefill-pin %.2f%s): %lld off-GPU experts copy "
                 "straight from the file, in %.1f s\n",
                 stager->pinned_in_place_bytes() / 1073741824.0, gib, automatic ? ", auto: min(off-GPU experts, RAM / 4, available / 2)" : "",
                 static_cast<long long>(n_in_place), ms_since(t0) / 1e3);
}

void GpuSession::Impl::setup_prompt_groups(DeviceContext& ctx) {
    group_tokens = 0;
    if (plan.group_tokens <= spec.n_ubatch || !stager) return;
    const PrefillGroupSizes gz = prefill_group_sizes(spec, plan.group_tokens);
    const auto n = [](int64_t e) { return static_cast<size_t>(e); };
    ctx.alloc().begin_arena(plan.group_bytes, "prompt groups");
    grp.x = ctx.alloc_n<float>(n(gz.x), "prompt group: hidden states");
    grp.h = ctx.alloc_n<float>(n(gz.h), "prompt group: normed hidden states");
    grp.ids = ctx.alloc_n<int32_t>(n(gz.ids), "prompt group: expert ids");
    grp.w = ctx.alloc_n<float>(n(gz.weights), "prompt group: expert weights");
    grp.margin = ctx.alloc_n<float>(n(gz.margin), "prompt group: router margins");
    grp.tok = ctx.alloc_n<int32_t>(n(gz.tok), "prompt group: token ids");
    grp.pos = ctx.alloc_n<int32_t>(n(gz.pos), "prompt group: block positions");
    grp.partial = ctx.alloc_n<float>(n(gz.partial), "prompt group: CPU partial sums");
    // The MoE of a whole group: every pair's grouping, input and output; gate / up / act are
    // moe_sc's, used in pieces of one block's pairs.
    moe_sg = moe_sc;
    moe_sg.down = ctx.alloc_n<float>(n(gz.moe_down), "prompt group: expert outputs");
    moe_sg.group_tok = ctx.alloc_n<int32_t>(n(gz.group), "prompt group: expert grouping");
    moe_sg.row_of = ctx.alloc_n<int32_t>(n(gz.group), "prompt group: expert grouping");
    moe_sg.group_exp = ctx.alloc_n<int32_t>(n(gz.group), "prompt group: expert grouping");
    moe_sg.gemm.act_elems = n(gz.gemm_act);
    moe_sg.gemm.act = ctx.alloc_n<uint16_t>(moe_sg.gemm.act_elems, "prompt group: f16 expert inputs");
    moe_sg.piece_rows = spec.n_ubatch * K;
    ctx.alloc().end_arena();
    // Pinned host: ids, tokens, block positions, the grouping (3 ints per pair); weights, margins,
    // hidden states and partial sums.
    const size_t G = n(gz.tokens), R = G * n(K);
    const size_t ints = R + G + n(gz.pos) + 3 * R, floats = R + G + 2 * G * n(E);
    void* unused = nullptr;
    auto* pin = static_cast<int32_t*>(ctx.host_mapped((ints + floats) * 4, &unused));
    grp.h_ids = pin;
    grp.h_tok = pin + R;
    grp.h_pos = grp.h_tok + G;
    moe_sg.host_idx = grp.h_pos + gz.pos;
    auto* pf = reinterpret_cast<float*>(pin + ints);
    grp.h_w = pf;
    grp.h_margin = pf + R;
    grp.h_hidden = grp.h_margin + G;
    grp.h_partial = grp.h_hidden + G * n(E);
    group_tokens = plan.group_tokens;
}

void GpuSession::Impl::flush_prompt_idle() {
    if (idle_layer < 0) return;
    double ms = stager ? stager->take_gpu_wait_ms() : 0.0;
    if (idle_cpu_pair) {
        float t = 0;
        if (cudaEventElapsedTime(&t, ev_gpu_done, ev_partial) == cudaSuccess) ms += std::max(0.f, t);
        else cudaGetLastError();
    }
    counters.layers[static_cast<size_t>(idle_layer)].prompt_idle_ms += ms;
    idle_layer = -1;
    idle_cpu_pair = false;
}

void GpuSession::Impl::moe_prompt(int il, const ChunkArgs& c, MoeScratch& sc) {
    flush_prompt_idle();  // the previous layer's events completed at this layer's router synchronisation
    if (!ev_gpu_done) {
        NITRO_CUDA_CHECK(cudaEventCreate(&ev_gpu_done));
        NITRO_CUDA_CHECK(cudaEventCreate(&ev_partial));
    }
    Layer& D = layers[static_cast<size_t>(il)];
    const cpu::ExpertWeights& W = experts[static_cast<size_t>(il)];
    ExpertLayerCounters& L = counters.layers[static_cast<size_t>(il)];
    const int k = static_cast<int>(K);
    const int64_t R = c.n * K;
    const std::span<const int32_t> ids(h_ids, static_cast<size_t>(R));

    // Residency of this step (and the cache's admissions), rows per expert, the cost model's paths.
    std::span<const uint8_t> resident(D.on_gpu);
    std::span<const Admission> admissions;
    if (cache) {
        const ExpertCache::LayerStep step = cache->access(il, ids);
        resident = step.resident;
        admissions = step.admissions;
    }
    std::vector<int64_t> rows(static_cast<size_t>(X), 0);
    for (int32_t e : ids) ++rows[static_cast<size_t>(e)];
    const PrefillCostMode mode = stager ? (prefill_mode == PrefillCostMode::Auto && !rates_measured ? PrefillCostMode::Cpu : prefill_mode)
                                        : PrefillCostMode::Cpu;
    const PrefillLayerPlan pp = plan_prefill_layer(mode, rates, rows, resident, W.expert_bytes(), flop_per_row(W), D.in_place);
    if (verbose) std::fprintf(stderr, "prefill cost model: %s\n", describe_prefill_plan(il, pp, W.expert_bytes()).c_str());

    // What the CPU skips (resident or staged), and the GPU's table for the combine.
    // (Without staged experts the layer's own slot table is that table: the stager, and with it
    // the staged table's buffers, may not exist, e.g. in the start-up warm-up.)
    std::vector<uint8_t> skip(resident.begin(), resident.end());
    int32_t* gpu_of = pp.staged.empty() ? nullptr : h_gpu_of + static_cast<size_t>(il) * static_cast<size_t>(X);
    for (size_t e = 0; gpu_of && e < skip.size(); ++e) {
        gpu_of[e] = D.h_slot_of[e];
        if (pp.path[e] == PrefillPath::Staged) skip[e] = 1, gpu_of[e] = static_cast<int32_t>(X);  // >= 0: computed on the GPU
    }
    // The admissions' buffers: filled by the CPU as it reads the expert (copy-on-compute), or by
    // the stager as it fills the expert's staging buffer.
    std::vector<uint8_t*> also_to(static_cast<size_t>(X), nullptr);
    for (const Admission& a : admissions) {
        uint8_t* buf = copier->buffer_data(a.buffer);
        if (pp.path[a.expert] == PrefillPath::Staged) also_to[a.expert] = buf;
        else copy_to[a.expert] = buf;
    }
    auto clear_copy_to = [&] {
        for (const Admission& a : admissions) copy_to[a.expert] = nullptr;
    };

    // GPU: grouping, resident experts (enqueued first, they run while the rest is prepared).
    MoePrefillGroups g;
    moe_prefill_begin(s, D.ex, h, c.n, E, k, h_ids, sc, g);
    if (pp.n_resident > 0) moe_prefill_resident(s, D.ex, g, D.h_slot_of.data(), sc);

    // CPU share on its own thread, the staged share on this one.
    // Beside staged experts the CPU share leaves fill_split_threads cores to the fill team.
    cpu::ThreadPool& cpu_pool = prompt_pool && !pp.staged.empty() ? *prompt_pool : *pool;
    cpu::MoeStats st;
    double cpu_ms = 0;
    std::exception_ptr cpu_error;
    std::jthread cpu_thread;
    if (pp.n_cpu > 0)
        cpu_thread = std::jthread([&] {
            const auto t0 = Clock::now();
            try {
                st = cpu::moe_ffn(cpu_pool, W, h_hidden, c.n, k, h_ids, h_w, skip.data(), h_partial, cpu_scratch,
                                  admissions.empty() ? nullptr : copy_to.data());
            } catch (...) {
                cpu_error = std::current_exception();
            }
            cpu_ms = ms_since(t0);
        });
    const auto t0 = Clock::now();
    const uint64_t staged_bytes0 = stager ? stager->stats().bytes : 0;
    const uint64_t in_place0 = stager ? stager->stats().in_place_experts : 0;
    try {
        for (int32_t e : pp.staged) {
            const auto parts = expert_parts(W, e);
            const uint8_t* base = stager->stage(parts, also_to[static_cast<size_t>(e)], s, pp.n_cpu > 0 ? fill_split_threads : 0);
            moe_prefill_expert(s, D.ex, g, e, base + PrefillStager::part_offset(parts, 0), base + PrefillStager::part_offset(parts, 1),
                               base + PrefillStager::part_offset(parts, 2), sc);
            stager->release(s);
        }
        if (pp.n_cpu > 0) NITRO_CUDA_CHECK(cudaEventRecord(ev_gpu_done, s));
    } catch (...) {
        if (cpu_thread.joinable()) cpu_thread.join();
        clear_copy_to();
        if (cache) cache->abandon(il);
        throw;
    }
    const double stage_ms = ms_since(t0);
    if (cpu_thread.joinable()) cpu_thread.join();
    clear_copy_to();
    if (cpu_error) {
        if (cache) cache->abandon(il);  // their buffers may not have been filled: never copy them
        std::rethrow_exception(cpu_error);
    }
    if (cache) cache->commit(il);

    // Counters of this layer's chunk.
    L.prompt_resident_experts += static_cast<uint64_t>(pp.n_resident);
    L.prompt_cpu_experts += static_cast<uint64_t>(pp.n_cpu);
    L.staged_experts += pp.staged.size();
    L.staged_pairs += static_cast<uint64_t>(pp.staged_rows);
    L.staged_bytes += stager ? stager->stats().bytes - staged_bytes0 : 0;
    L.staged_in_place += stager ? stager->stats().in_place_experts - in_place0 : 0;
    L.stage_ms += pp.staged.empty() ? 0.0 : stage_ms;
    L.gpu_pairs += static_cast<uint64_t>(R - pp.cpu_rows - pp.staged_rows);
    L.cpu_pairs += static_cast<uint64_t>(st.rows);
    L.cpu_experts += static_cast<uint64_t>(st.experts);
    L.cpu_bytes += st.bytes;
    L.cpu_ms += cpu_ms;
    L.prompt_cpu_ms += cpu_ms;

    // Combine: resident and staged experts' rows (gpu_of >= 0) + the CPU's partial sum.
    if (gpu_of) NITRO_CUDA_CHECK(cudaMemcpyAsync(d_gpu_of, gpu_of, static_cast<size_t>(X) * 4, cudaMemcpyHostToDevice, s));
    if (pp.n_cpu > 0) {
        NITRO_CUDA_CHECK(cudaEventRecord(ev_partial, s));  // reached when the CPU was done (enqueued after the join)
        NITRO_CUDA_CHECK(cudaMemcpyAsync(partial, h_partial, static_cast<size_t>(c.n * E) * 4, cudaMemcpyHostToDevice, s));
    }
    ExpertSlots gx = D.ex;
    if (gpu_of) gx.slot_of = d_gpu_of;
    moe_combine(s, gx, c.n, E, k, d_ids, d_w, h_ids, pp.n_cpu > 0 ? partial : nullptr, x, sc);
    idle_layer = il;
    idle_cpu_pair = pp.n_cpu > 0;
}

}  // namespace nitro::cuda
