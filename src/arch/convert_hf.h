// Hugging Face safetensors -> GGUF, for gpt-oss checkpoints with unquantized (bf16/f16/f32)
// weights, as llama.cpp's convert_hf_to_gguf.py (class GptOssModel) writes them: llama.cpp's
// tensor names and shapes (src/arch/arch_tables.cpp), the interleaved gate_up_proj split into
// gate = [..., ::2] and up = [..., 1::2], experts transposed to ggml's [n_in, n_out, n_expert],
// gpt-oss.* hyperparameters and the tokenizer.ggml.* vocabulary from tokenizer.json.
//
// Weight types: experts MXFP4 (or another quantizable type), token_embd/output Q8_0, attention
// projections F16, everything 1-D plus the router F32 (as llama.cpp keeps ffn_gate_inp).
#pragma once

#include "quant/types.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace nitro {

struct ConvertHfOptions {
    std::string in_dir;           ///< folder with config.json, model*.safetensors, tokenizer.json
    std::string out;              ///< output .gguf path
    std::string name;             ///< general.name (default: the folder's name)
    std::string chat_template;    ///< file whose text becomes tokenizer.chat_template ("" = none)
    GgmlType expert_type = GgmlType::MXFP4;
    GgmlType embd_type = GgmlType::Q8_0;   ///< token_embd and output
    GgmlType attn_type = GgmlType::F16;    ///< attn_q/k/v/output weights
    std::vector<std::pair<std::string, std::string>> extra_strings;  ///< more general.* string keys
};

/// A summary of what was written.
struct ConvertHfResult {
    int64_t n_tensors = 0;
    uint64_t file_bytes = 0;
    int64_t n_vocab = 0;
};

/// Converts. Throws nitro::Error naming the file, tensor or key on anything unexpected (missing
/// tensor, wrong shape, unsupported dtype, a config that is not gpt-oss).
ConvertHfResult convert_hf_gptoss(const ConvertHfOptions& opt,
                                  const std::function<void(const std::string&)>& log = {});

/// One tensor of a safetensors file, mapped.
struct SafeTensor {
    std::string name;
    std::string dtype;             ///< "F32", "BF16", "F16"
    std::vector<int64_t> shape;    ///< row-major, outermost first (as torch)
    const uint8_t* data = nullptr;
    size_t n_bytes = 0;
    int64_t n_elements() const;
    /// Element i (row-major) as float.
    float at(int64_t i) const;
};

}  // namespace nitro
