// Placement as data: a pure function from (model, VRAM budget, context, user overrides) to a plan
// that says where every tensor and every routed expert lives. The GPU engine executes a plan; the
// `nitro plan` command prints one without a GPU. Expert granularity: each layer has its own list
// of experts resident in VRAM slots; the other experts of that layer are computed by the CPU
// straight from the mmap'd file (the hybrid executor, docs/hybrid.md).
//
// Flags as llama.cpp users know them (common/arg.cpp): --cpu-moe (every expert tensor on the
// CPU), --n-cpu-moe N (the experts of the first N layers on the CPU), -ot/--override-tensor
// REGEX=DEVICE (a tensor whose name matches REGEX goes to DEVICE: CPU, or CUDA0 / GPU).
#pragma once

#include "runtime/model.h"
#include "ops/gpu_limits.h"
#include "runtime/model_spec.h"

#include <nlohmann/json_fwd.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace nitro {

/// Where a tensor lives.
enum class Device { Gpu, Cpu };

/// A llama.cpp-style tensor override: tensors whose name matches `pattern` (ECMAScript regex,
/// searched anywhere in the name, as std::regex_search) go to `device`.
struct TensorOverride {
    std::string pattern;
    Device device = Device::Cpu;
};

/// Parses "REGEX=DEVICE" (DEVICE: CPU, GPU, CUDA0; case-insensitive). Throws nitro::Error naming
/// the argument when there is no '=', the device is unknown or the regex does not compile.
TensorOverride parse_tensor_override(const std::string& arg);

/// Where a layer's static residency comes from when no override decides.
enum class ResidencySource {
    Auto,    ///< the hot set when one is given, else an even fill
    HotSet,  ///< a hot-set file (nitro sim --write-hot-set): the most selected experts per layer
    Even,    ///< the same number of slots in every layer, experts in id order
    Layers,  ///< whole layers, last layers first (llama.cpp --n-cpu-moe's shape, as many as fit)
};

/// The hot set: per layer, expert ids ranked by how often a profile selected them (most first).
struct HotSet {
    std::vector<std::vector<int32_t>> layers;
    std::string source;  ///< what it was made from (file path / trace), for messages
};

/// Reads a hot-set file (JSON, docs/hybrid.md "Hot-set file"). Throws nitro::Error naming the file
/// and what is wrong (not JSON, wrong format tag, ids out of range, layer count differs from the
/// model's when n_layer > 0).
HotSet read_hot_set(const std::string& path, int64_t n_layer, int64_t n_expert);
/// Writes one (ids per layer, most selected first) with the counts they were ranked by.
void write_hot_set(const std::string& path, const std::vector<std::vector<int32_t>>& ranked,
                   const std::vector<std::vector<uint64_t>>& counts, const std::string& source);

struct PlacementOptions {
    double vram_budget_gib = 0;      ///< everything the process allocates on the GPU must fit (> 0)
    bool cpu_moe = false;            ///< --cpu-moe
    int n_cpu_moe = 0;               ///< --n-cpu-moe N (0 = off)
    std::vector<TensorOverride> overrides;  ///< -ot, applied in order, first match wins
    ResidencySource source = ResidencySource::Auto;
    const HotSet* hot_set = nullptr;
    /// GPU memory the process needs besides the plan's buffers: the CUDA context, cuBLAS (and its
    /// 32 MiB workspace), the kernels' modules and a 64 MiB margin for modules loaded late. The GPU
    /// engine passes its measurement; otherwise ASSUMED 700 MiB (MEASURED 691 MiB on an H200 with
    /// CUDA 13 and driver 580; smaller GPUs take less).
    uint64_t runtime_overhead_bytes = 700ull << 20;
    /// Scratch slots for experts staged to the GPU during prompt processing (docs/hybrid.md,
    /// "Prompts"); reserved only when some expert stays off the GPU. 0 = no staging.
    int prefill_stage_slots = 4;
    /// Layer-major prompt groups (docs/hybrid.md "Layer-major groups"): prompt tokens whose MoE
    /// layers run together, so a staged expert crosses PCIe once per layer per group instead of
    /// once per n_ubatch block. Reserved only with staging slots; <= n_ubatch: none (every block
    /// alone); < 0: auto, 4 x n_ubatch but at most an eighth of the budget. An explicit size shrinks
    /// only to what is left of the budget. Never more than n_ctx tokens (no prompt is longer).
    int64_t prefill_group = -1;
};

/// One layer's routed experts: which are resident in VRAM slots (slot s holds resident[s]).
struct LayerPlacement {
    int64_t n_expert = 0;            ///< the layer's routed experts (0: a dense FFN layer, nothing to place)
    std::vector<int32_t> resident;
    std::string why;  ///< "hot set", "even fill", "--n-cpu-moe", "-ot 'exps=CPU'", ...
};

/// A complete plan. Bytes are what the GPU engine allocates for each part.
struct Plan {
    uint64_t budget_bytes = 0;
    uint64_t dense_bytes = 0;      ///< every tensor that is not a routed expert (embeddings, attention, norms, router, LM head)
    uint64_t expert_biases_bytes = 0;  ///< routed experts' biases (all experts, small)
    uint64_t kv_bytes = 0;         ///< K/V cache, F16, at the spec's capacities, per sequence (+ the slot tables, + DeltaNet recurrent state per sequence)
    uint64_t compute_bytes = 0;    ///< activations and scratch for one n_ubatch chunk (gpu_compute_bytes)
    uint64_t overhead_bytes = 0;   ///< PlacementOptions::runtime_overhead_bytes
    uint64_t expert_bytes = 0;     ///< one expert's gate + up + down, bytes (the same in every layer)
    uint64_t slots_bytes = 0;      ///< all resident experts
    int stage_slots = 0;           ///< prompt staging scratch slots (0 when every expert is resident)
    uint64_t stage_slot_bytes = 0; ///< one staging slot: the largest expert of any layer, gate | up | down, 256-byte aligned parts
    uint64_t stage_bytes = 0;      ///< all staging slots and the prompt's expert table (one arena)
    int64_t group_tokens = 0;      ///< tokens of a layer-major prompt group (0: none, blocks run alone)
    uint64_t group_bytes = 0;      ///< its buffers (prefill_group_sizes(spec, group_tokens).bytes())
    int64_t n_layer = 0, n_expert = 0, n_expert_used = 0;
    std::vector<LayerPlacement> layers;
    std::vector<std::string> warnings;  ///< e.g. -ot patterns that matched no tensor

    /// Bytes of GPU memory the plan uses in total.
    uint64_t total_bytes() const {
        return dense_bytes + expert_biases_bytes + kv_bytes + compute_bytes + overhead_bytes + slots_bytes + stage_bytes +
               group_bytes;
    }
    int64_t n_resident() const;
    /// Routed experts of all layers (layers without routed experts count none).
    int64_t n_experts() const;
    /// "gpu" (every expert resident), "cpu-experts" (none), "hybrid" (some).
    std::string mode() const;
    /// CALCULATED: expert bytes the CPU reads per decode token if the router picks uniformly:
    /// sum over layers of n_expert_used * (1 - resident / n_expert) * expert_bytes.
    double cpu_bytes_per_token_uniform() const;
};

/// What a placement depends on: the spec and the bytes of every tensor, the dense core apart
/// from the routed experts. From a loaded model, or from a synth preset (no file needed).
struct ModelLayout {
    ModelSpec spec;
    struct Tensor {
        std::string name;
        uint64_t bytes = 0;
    };
    std::vector<Tensor> dense;          ///< every tensor the GPU engine uploads that is not a routed expert
    std::vector<Tensor> expert_biases;  ///< ffn_*_exps.bias (uploaded whole, every expert)
    /// Per layer: ffn_gate_exps, ffn_up_exps, ffn_down_exps (whole tensors, n_expert experts each).
    std::vector<std::array<Tensor, 3>> experts;
    std::string description;  ///< "gpt-oss-120b.gguf", "synth preset gpt-oss-120b"
    std::string expert_type;  ///< "MXFP4", ...
};
ModelLayout model_layout(const Model& model, const ModelSpec& spec);
/// The layout `nitro synth --arch ARCH --preset PRESET --type T` would write, computed from the
/// architecture's tensor table without writing anything. Throws for an unknown arch or preset.
ModelLayout synth_layout(const std::string& arch, const std::string& preset, GgmlType expert_type, const SessionOptions& so);

/// The plan for a model (its layout) under `opt`. Pure. Throws nitro::Error when the budget cannot
/// hold the dense core, the K/V cache and the buffers (naming each part and the shortfall), or
/// when an override asks for something the hybrid cannot do (a dense tensor on the CPU; experts
/// forced onto the GPU that do not fit).
Plan plan_placement(const ModelLayout& layout, const PlacementOptions& opt);

/// The startup line: "experts: N resident slots (X MiB) in VRAM, M on CPU; dense core Y MiB, KV Z MiB,
/// budget B MiB".
std::string plan_summary_line(const Plan& p);
/// The plan as JSON (every byte count, per-layer resident lists, warnings).
nlohmann::json plan_to_json(const Plan& p);

/// Element counts of the activations and scratch the GPU engine allocates for a chunk of
/// n_ubatch tokens. The engine allocates exactly these (gpu/gpu_session.cpp) and the plan counts
/// them, so the two cannot disagree. f32 unless noted.
struct GpuScratchSizes {
    static constexpr int64_t kMaxLogitsRows = 64;  ///< the LM head writes at most this many rows at a time
    int64_t x = 0, h = 0, q = 0, k = 0, v = 0, attn = 0, router = 0;
    int64_t ids = 0;          ///< int32 [n_ubatch, n_expert_used]
    int64_t weights = 0;
    int64_t margin = 0;       ///< router margins [n_ubatch]
    int64_t logits = 0, logits_rows = 0;
    int max_split = 1;        ///< flash-decoding splits of the longest layer
    int64_t attn_partial = 0;
    int64_t tok = 0;          ///< int32 token ids
    int64_t pos = 1;          ///< int32 first position of each sequence's rows in a chunk [n_seq]
    int64_t moe_act = 0, moe_down = 0, moe_gate = 0, moe_up = 0;
    int64_t group = 0;        ///< int32, three arrays of this size (prefill grouping)
    int64_t group_off = 0;    ///< int32 [2 (n_expert + 1)]: offsets and tile starts of the grouping on the device
    int64_t gemm_act = 0, gemm_w = 0;  ///< f16 (prefill GEMMs)
    int64_t partial = 0;      ///< the CPU experts' partial sum, [n_ubatch, n_embd]
    /// Activations rounded to a weight's vec-dot type (cuda::round_acts), [n_ubatch, largest
    /// matrix input]; it also holds the 8-bit activations of the integer decode products (q8_act_bytes
    /// of the decode MoE's n*n_expert_used rows of n_ff_exp values), whichever is larger.
    int64_t xr = 0;
    /// The normed hidden state h of a decode chunk (kGemvMaxTokens rows at most) in 8-bit blocks,
    /// written with h by the fused RMSNorm (cuda::rms_norm_q8) for the products that read h:
    /// q8_act_bytes(min(n_ubatch, kGemvMaxTokens), n_embd) bytes, in floats. Apart from xr, which
    /// the products in between (attn_out, the shared expert's down) overwrite.
    int64_t hq = 0;
    int64_t qg = 0, gate = 0; ///< gated attention: attn_q's output [n_ubatch, 2 n_q] ([q, gate] per head), the gate [n_ubatch, n_q]
    /// Gated DeltaNet: q|k|v, z, beta/alpha, beta, log decay, conv output, core output and (older
    /// files) the fused ssm_in output, [n_ubatch, *] each.
    int64_t ssm_qkv = 0, ssm_z = 0, ssm_ba = 0, ssm_beta = 0, ssm_g = 0, ssm_conv = 0, ssm_core = 0, ssm_in = 0;
    /// shared expert and dense FFN: [n_ubatch, max(n_ff_shexp, n_ff)] x 2; the shared expert's output [n_ubatch, n_embd]
    int64_t sh_gate = 0, sh_up = 0, sh_down = 0;
    /// Device bytes of all of them in one arena: 256-byte aligned pieces, the sum rounded by
    /// vram_alloc_size.
    uint64_t bytes() const;
};

GpuScratchSizes gpu_scratch_sizes(const ModelSpec& spec);

/// The buffers of a layer-major prompt group of `tokens` tokens (hybrid placement, docs/hybrid.md
/// "Layer-major groups"), beside GpuScratchSizes' (which hold one n_ubatch block and the MoE's
/// gate/up pieces): what must live from a layer's first block to its MoE step, for every token of
/// the group. Elements (f32 / int32 unless said); per token of gpt-oss-120b about 104 KB
/// (CALCULATED: 3 n_embd floats of x, h and partial sum, n_expert_used x n_embd floats of expert
/// outputs and as many f16 expert inputs).
struct PrefillGroupSizes {
    int64_t tokens = 0;
    int64_t x = 0;         ///< [tokens, n_embd] residual stream
    int64_t h = 0;         ///< [tokens, n_embd] normed hidden state (+ one block's n_o overhang)
    int64_t ids = 0, weights = 0;  ///< [tokens, n_expert_used]
    int64_t margin = 0, tok = 0;   ///< [tokens]
    int64_t pos = 0;       ///< each block's first position
    int64_t partial = 0;   ///< [tokens, n_embd] the CPU experts' partial sum
    int64_t moe_down = 0;  ///< [tokens * n_expert_used, n_embd] every pair's expert output
    int64_t group = 0;     ///< three int32 arrays of tokens * n_expert_used (grouping by expert)
    int64_t gemm_act = 0;  ///< f16 [tokens * n_expert_used, n_embd] grouped expert inputs
    uint64_t bytes() const;
};
PrefillGroupSizes prefill_group_sizes(const ModelSpec& spec, int64_t tokens);
/// gpu_scratch_sizes(spec).bytes().
uint64_t gpu_compute_bytes(const ModelSpec& spec);

/// Bytes of the GPU's K/V cache for spec (F16 keys and values at each layer's capacity for every
/// sequence, the slot tables, DeltaNet recurrent state; one arena, rounded as allocated).
uint64_t kv_cache_bytes(const ModelSpec& spec);

/// The largest context (<= spec.n_ctx) whose K/V cache, buffers and runtime fit opt's budget beside
/// dense_bytes of dense core, with spec's n_ubatch (capped at the context) and sequences; 0: none.
int64_t largest_fitting_context(const ModelSpec& spec, uint64_t dense_bytes, const PlacementOptions& opt);

}  // namespace nitro
