// Prompt processing in hybrid placement (issue 14): where each non-resident expert of one MoE
// layer is computed for a multi-token chunk.
//
// Per layer, a prompt chunk's (token, expert) pairs are grouped by expert. A resident expert runs
// on the GPU from its slot. Every other expert takes one of two paths:
//   - CPU: the CPU's multi-token kernel reads the expert from RAM once and multiplies all of its
//     rows (cpu::moe_ffn), on the worker threads;
//   - staged: the expert's bytes are copied from RAM into a pinned buffer (CPU memcpy), sent over
//     PCIe into a scratch slot (copy stream) and multiplied there by the GPU's GEMM.
// The CPU share and the staged share run at the same time, so the layer takes about
//   max(CPU time of the CPU share, max(copy time of the staged share, GPU time of resident + staged)).
// They also share the CPU's cores: while a CPU share runs, the fill team uses part of the threads
// (fill_gb_s) and the CPU share the rest (cpu_*); with no CPU share the whole team fills
// (fill_alone_gb_s). MEASURED on the lent H200 host (gpt-oss-120b, 4,096-token chunk, docs/hybrid.md):
// 16 fill threads alone stage 2.1x faster than 8 beside a 16-thread CPU share.
// plan_prefill_layer picks the partition that minimises that estimate: the experts with the most
// rows are the ones worth staging (a copy costs the same whatever the rows; the CPU's cost grows
// with them), so it stages the k experts with the most rows for the k with the smallest estimate.
// The rates come from measurements at engine start (gpu/gpu_session.cpp measures them).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace nitro {

/// How non-resident experts of a prompt chunk are placed: `--prefill-cost-model`.
enum class PrefillCostMode {
    Auto,   ///< the cost model decides per expert (default)
    Cpu,    ///< every non-resident expert on the CPU (no staging)
    Stage,  ///< every non-resident expert with rows staged to the GPU
};
/// "auto" | "cpu" | "stage"; throws nitro::Error naming the value otherwise.
PrefillCostMode parse_prefill_cost_mode(const std::string& s);
const char* prefill_cost_mode_name(PrefillCostMode m);

/// Measured rates the model is fed (MEASURED at engine start; all > 0).
struct PrefillRates {
    double pcie_gb_s = 0;     ///< host-to-device copy from pinned memory, GB/s (1e9 bytes)
    double fill_gb_s = 0;     ///< CPU copy from the mapped file into a pinned buffer, GB/s, by the part of the
                              ///< fill team that runs beside a CPU share
    double fill_alone_gb_s = 0; ///< the same by the whole team (no CPU share in the layer); 0 = fill_gb_s
    double dram_gb_s = 0;     ///< the CPU experts' weight read rate, GB/s (the CPU share's threads)
    double cpu_gflop_s = 0;   ///< the CPU experts' arithmetic rate, GFLOP/s (the CPU share's threads)
    double gpu_gflop_s = 0;   ///< the GPU's expert GEMM rate incl. dequantisation, GFLOP/s: one staged
                              ///< expert at a time, as the staged share runs
    /// The same for the resident experts, which run as one grouped GEMM over all of them
    /// (moe_prefill_resident); 0 = gpu_gflop_s. MEASURED on the H200 with qwen3-30b-a3b's small experts
    /// (2048 x 768), one expert alone ran at 17 TFLOP/s, so the model priced a 4,096-token layer's GPU
    /// work at 17.8 ms, kept ~750 rows on the CPU to balance it, and the prompt ran at 0.78x of staging
    /// everything (docs/hybrid.md).
    double gpu_grouped_gflop_s = 0;
};

/// Path of one expert in one layer's chunk.
enum class PrefillPath : uint8_t { None, Resident, Cpu, Staged };

/// The decision for one layer.
struct PrefillLayerPlan {
    std::vector<PrefillPath> path;   ///< [n_expert]; None = no rows in this chunk
    std::vector<int32_t> staged;     ///< staged experts, in the order they are staged (most rows first)
    int32_t n_resident = 0, n_cpu = 0;
    int64_t cpu_rows = 0, staged_rows = 0;
    double est_cpu_ms = 0;    ///< CALCULATED time of the CPU share
    double est_copy_ms = 0;   ///< CALCULATED time to fill and copy the staged share
    double est_gpu_ms = 0;    ///< CALCULATED GPU time of the resident and staged experts
    double est_ms() const;    ///< max(CPU, copy, GPU)
};

/// One layer's decision. rows: [n_expert] (token, expert) pairs per expert in the chunk;
/// resident: [n_expert] nonzero = computed from a VRAM slot; expert_bytes: one expert's gate, up and
/// down bytes; flop_per_row: 2 x (gate + up + down) weights (one token through the expert);
/// in_place: [n_expert] or empty, nonzero = the expert's pages of the file are page-locked
/// (--prefill-pin), so staging it is a DMA straight from the file with no CPU fill.
/// Staging a set S costs max(CPU of the rest, copy of S, GPU of resident + S) where the copy is
/// max(bytes of S / pcie, bytes of S's ring experts / fill): the in-place DMAs and the ring share
/// the link, and only the ring's experts are filled. Among the in-place and among the ring
/// candidates the ones with most rows are staged first; the best pair of counts is searched.
/// Ties in rows are broken by lower expert id, so the decision is deterministic. The est_* fields
/// are 0 unless every rate is positive (the forced modes need none).
PrefillLayerPlan plan_prefill_layer(PrefillCostMode mode, const PrefillRates& r, std::span<const int64_t> rows,
                                    std::span<const uint8_t> resident, uint64_t expert_bytes, double flop_per_row,
                                    std::span<const uint8_t> in_place = {});

/// Model of one expert on the CPU: bytes / dram + rows x flop / cpu rate, in ms.
double prefill_cpu_ms(const PrefillRates& r, uint64_t bytes, int64_t rows, double flop_per_row);
/// Fill + PCIe of one expert (the two overlap in the ring: the slower sets the pace), in ms; alone:
/// no CPU share beside it (the whole fill team, fill_alone_gb_s).
double prefill_copy_ms(const PrefillRates& r, uint64_t bytes, bool alone = false);
/// Copy time of a staged share, in ms: ring_bytes go through the fill and PCIe, in_place_bytes over
/// PCIe only; the link carries both and the fill runs beside it: max(all / pcie, ring / fill).
double prefill_copy_ms(const PrefillRates& r, uint64_t ring_bytes, uint64_t in_place_bytes, bool alone);
/// GPU GEMM time of rows through one expert, in ms; grouped: a resident expert (gpu_grouped_gflop_s).
double prefill_gpu_ms(const PrefillRates& r, int64_t rows, double flop_per_row, bool grouped = false);

/// --prefill-pin auto (-1): bytes of the off-GPU experts to page-lock in place, at most a quarter of
/// the host's RAM and half of what is available now, never more than the off-GPU experts:
/// min(off_gpu_bytes, mem_total / 4, mem_available / 2). The bound keeps most of RAM swappable
/// (pinning 15 GB fails on real machines, ollama #11772: this pins pages the model already maps,
/// not new buffers, but a locked page is one the OS can no longer trim).
uint64_t prefill_pin_auto_bytes(uint64_t off_gpu_bytes, uint64_t mem_total, uint64_t mem_available);

/// One line: "layer 3: 12 resident, 90 staged (1.2 GB, 45 ms copy), 26 on the CPU (31 rows, 20 ms)".
std::string describe_prefill_plan(int layer, const PrefillLayerPlan& p, uint64_t expert_bytes);

}  // namespace nitro
