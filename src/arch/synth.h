// `nitro synth`: GGUF models of real shapes with random weights, streamed to disk.
//
// A synthetic model has exactly the tensor names, shapes and types llama.cpp expects for its
// architecture, so the same file runs in llama.cpp and nitro and can be compared, and models of
// any size (gpt-oss-120b: 60 GiB) can be made without a download and without holding them in RAM.
#pragma once

#include "arch/arch.h"
#include "arch/hparams.h"
#include "quant/types.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace nitro {

struct SynthOptions {
    std::string arch = "gpt-oss";         ///< "gpt-oss", "qwen3moe" or "qwen3next"
    std::string preset = "tiny";          ///< tiny, gpt-oss-20b, gpt-oss-120b, qwen3-30b-a3b, qwen3-next-80b-a3b
    std::optional<GgmlType> expert_type;  ///< routed-expert weight type (default: MXFP4 for gpt-oss, Q8_0 for qwen3moe and qwen3next)
    std::optional<GgmlType> dense_type;   ///< dense matrices (attention, DeltaNet, shared expert); default F16
    std::string vocab_from;               ///< copy tokenizer.* metadata (and n_vocab) from this GGUF
    std::string tokenizer_dir;            ///< Hugging Face tokenizer folder (tokenizer.json ...), see gguf/hf_tokenizer.h
    double router_skew = 0;               ///< Zipf exponent S of expert popularity (0: no skew), see synth_router_ranks
    uint64_t seed = 42;
    int n_threads = 0;                    ///< generating threads (0: all cores, up to 16); the bytes do not depend on it
    int64_t chunk_bytes = 4 << 20;        ///< rows are generated in chunks of about this many bytes (>= 1; nor on it)
    std::string out;                      ///< output path
};

/// Hyperparameters of a preset of an architecture (arch/<name>.cpp); n_vocab gets the preset's
/// vocabulary size (0: a minimal one), tied_output (if given) whether it is written without
/// output.weight. Throws nitro::Error for an unknown architecture or preset (listing the known ones).
ModelHparams synth_preset(const std::string& arch, const std::string& preset, int64_t* n_vocab, bool* tied_output = nullptr);
/// The architectures that have a preset of this name: one for a model's preset (gpt-oss-120b),
/// several for "tiny", none for an unknown name.
std::vector<std::string> synth_archs_with_preset(const std::string& preset);
/// "ARCH:PRESET" or "PRESET" (its architecture found by synth_archs_with_preset) -> {arch, preset}.
/// Throws nitro::Error naming `what` (the flag) for an unknown or ambiguous preset.
std::pair<std::string, std::string> synth_arch_preset(const std::string& spec, const std::string& what);

/// The popularity rank (0 = most popular) of each expert of layer `layer` under --router-skew: a
/// fixed random permutation per (seed, layer). With skew S, gpt-oss gets router bias
/// b_e = -S ln(rank_e + 1), so an expert's selection odds fall as a power law of its rank;
/// qwen3moe (no router bias) gets router row e scaled by (rank_e + 1)^-S: a popular expert's logits
/// spread wider, so it is among the top-k more often (for isotropic inputs an expert is chosen at
/// most about half of the time, when its logit is positive; docs/peer.md has measured shares).
std::vector<int> synth_router_ranks(uint64_t seed, int64_t layer, int64_t n_expert);

/// The weight type `nitro synth` writes for a tensor of this kind (routed experts: expert_type;
/// embeddings and LM head Q8_0; dense matrices dense_type (F16 by default); norms, biases, router,
/// sinks, conv kernels, decay parameters F32).
GgmlType synth_tensor_type(TensorKind kind, GgmlType expert_type, GgmlType dense_type = GgmlType::F16);
/// The routed-expert type an architecture's presets get by default (ArchInfo::default_expert_type).
GgmlType synth_default_expert_type(const std::string& arch);

/// Writes the model. `progress(done_bytes, total_bytes)` is called as tensor data is written (from
/// a writer thread, one call at a time).
/// Throws nitro::Error on bad options or I/O failure (no partial file is left under `out`).
void synth_model(const SynthOptions& opt, const std::function<void(uint64_t, uint64_t)>& progress = {});

}  // namespace nitro
