// Which GGUF files of a Hugging Face repository a model reference names, by llama.cpp's rules
// (common/download.cpp, `-hf REPO[:QUANT]`), so `nitro run -hf X:Q` and `llama-cli -hf X:Q` take
// the same file:
//   - REPO:QUANT takes the first model GGUF (in the Hub's listing order) whose path holds QUANT,
//     case-insensitively, followed by '.' or '-' ("...-Q4_K_M.gguf", "...-q4_k_m-00001-of-00003.gguf");
//   - REPO alone tries Q4_K_M, then Q8_0, then takes the first model GGUF;
//   - a file name (REPO:FILE.gguf) takes that file, compared case-insensitively;
//   - "model GGUF" leaves out projector, imatrix and draft-model files (mmproj, imatrix, mtp-,
//     eagle3-, dflash-, dspark- in the file name) and every split shard but the first;
//   - a split model (NAME-00001-of-0000N.gguf) brings all N shards.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace nitro::hub {

/// `OWNER/NAME[:QUANT|:FILE.gguf]`, parsed.
struct ModelRef {
    std::string repo;   ///< OWNER/NAME
    std::string quant;  ///< e.g. Q4_K_M ("" = the default choice)
    std::string file;   ///< a file path in the repository ("" = choose by quant)
    std::string text() const;  ///< back to OWNER/NAME[:...]
};

/// Parses `spec`; throws nitro::Error naming the expected form.
ModelRef parse_model_ref(const std::string& spec);

/// One file of a repository, as the Hub lists it (tree API) or as the cache holds it.
struct RepoFile {
    std::string path;    ///< in the repository, '/'-separated
    uint64_t size = 0;   ///< bytes
    std::string sha256;  ///< the LFS oid (SHA-256 of the content); "" for a file kept in git itself
    std::string oid;     ///< git blob id (names a non-LFS file's blob in the cache)
};

/// A GGUF file name taken apart as llama.cpp does: PREFIX[-NNNNN-of-NNNNN].gguf, and the quant tag
/// (the last '-' or '.' separated word of PREFIX, upper case: "Q4_K_M", "MXFP4", "BF16").
struct GgufName {
    bool gguf = false;  ///< ends in .gguf
    std::string prefix;
    std::string tag;
    int index = 1, count = 1;  ///< shard index (1-based) and count; 1, 1 when not split
};
GgufName parse_gguf_name(const std::string& path);

/// The files `ref` names among `files` (listing order kept), the first shard first. Throws
/// nitro::Error, listing the repository's quants and GGUF files, when there is no such file or
/// quant, no GGUF at all, or a shard of a split model is missing. `repo_label` names the source in
/// messages (the repository, or its cached copy).
std::vector<RepoFile> pick_model_files(const std::vector<RepoFile>& files, const ModelRef& ref,
                                       const std::string& repo_label);

/// The quant tags of the model GGUFs among `files`, in listing order, each once.
std::vector<std::string> quant_tags(const std::vector<RepoFile>& files);

}  // namespace nitro::hub
