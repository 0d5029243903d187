// What a model is made of: hyperparameters, tokenizer, tensor types and bytes by category.
// The per-expert byte count computed here is what placement and the cache simulator use.
#pragma once

#include "arch/arch.h"
#include "arch/hparams.h"
#include "core/text.h"
#include "gguf/gguf.h"

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace nitro {

struct TypeUsage {
    int64_t n_tensors = 0;
    uint64_t n_bytes = 0;
    int64_t n_elements = 0;
};

/// Summary printed by `nitro inspect`.
struct ModelSummary {
    std::string path;
    int n_shards = 1;
    uint32_t gguf_version = 0;
    uint64_t file_bytes = 0;          ///< all shards, bytes
    ModelHparams hp;
    /// Why hyperparameters could not be read (a GGUF that is not a model nitro knows); empty if read.
    std::string hparams_error;
    std::string tokenizer_model;      ///< tokenizer.ggml.model ("gpt2" = byte-level BPE)
    std::string tokenizer_pre;        ///< tokenizer.ggml.pre ("gpt-4o", "qwen2", ...)
    int64_t vocab_size = 0;           ///< entries of tokenizer.ggml.tokens
    int64_t n_merges = 0;             ///< entries of tokenizer.ggml.merges
    bool has_chat_template = false;
    int64_t n_tensors = 0;
    int64_t n_params = 0;             ///< total elements of all tensors
    uint64_t tensor_bytes = 0;        ///< bytes of all tensor data
    std::map<GgmlType, TypeUsage> types;
    std::map<TensorCategory, uint64_t> bytes_by_category;
    /// Routed-expert bytes per layer (index = layer; weights and biases), bytes.
    std::vector<uint64_t> expert_bytes_per_layer;
    /// Per expert of each layer: its gate + up + down weight matrices, bytes. This is one expert
    /// as placement counts it (nitro plan's "one expert", a VRAM slot, what the CPU reads to
    /// compute it); the experts' biases stay with the dense core.
    std::vector<uint64_t> bytes_per_expert_per_layer;
    /// Max over layers of bytes_per_expert_per_layer, bytes (what one VRAM slot must hold).
    uint64_t bytes_per_expert = 0;
    /// Max over layers of one expert's bias bytes (gate, up, down biases; 0 without biases).
    uint64_t bias_bytes_per_expert = 0;
};

/// Builds the summary. A file without model hyperparameters (e.g. a tensor archive) still gets
/// types and bytes; `hparams_error` says what was missing.
ModelSummary summarize_model(const GgufModel& model);
/// The summary as JSON (the `nitro inspect --json` schema; documented in docs/inspect.md).
nlohmann::json summary_to_json(const ModelSummary& s);
/// The summary as aligned, human-readable text; every figure carries its unit.
std::string summary_to_text(const ModelSummary& s);


}  // namespace nitro
