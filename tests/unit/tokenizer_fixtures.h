// Shared helpers of the tokenizer and chat tests: the real tokenizers (from the GGUF fixtures in
// NITRO_SHARED_DIR/fixtures) and the golden JSONL records. A missing file is a test failure
// (ASSERT/throw), never a skip.
#pragma once

#include "gguf/gguf.h"
#include "tokenizer/bpe.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace nitro::test {

/// Path of a file under the shared reference folder; throws if it does not exist.
inline std::string shared_file(const std::string& rel) {
    const std::string p = std::string(NITRO_SHARED_DIR) + "/" + rel;
    if (!std::filesystem::exists(p))
        throw std::runtime_error("shared reference file is missing: " + p +
                                 " (set NITRO_SHARED_DIR to the shared/ folder)");
    return p;
}

/// The fixture file of a model family: "gptoss" or "qwen3".
inline std::string fixture_for(const std::string& family) {
    return shared_file(family == "gptoss" ? "fixtures/tiny-gptoss-mxfp4.gguf" : "fixtures/tiny-qwen3moe-q8.gguf");
}

/// The tokenizer of a model family, loaded once per test binary.
inline const Tokenizer& tokenizer_for(const std::string& family) {
    static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
    auto& slot = cache[family];
    if (!slot) {
        GgufModel model(fixture_for(family));
        slot = std::make_unique<Tokenizer>(Tokenizer::from_gguf(model.metadata()));
    }
    return *slot;
}

/// Reads a JSONL file (keys kept in file order); throws if missing or empty.
inline std::vector<nlohmann::ordered_json> read_jsonl(const std::string& rel) {
    std::ifstream in(shared_file(rel));
    std::vector<nlohmann::ordered_json> out;
    std::string line;
    while (std::getline(in, line))
        if (!line.empty()) out.push_back(nlohmann::ordered_json::parse(line));
    if (out.empty()) throw std::runtime_error("golden file has no records: " + rel);
    return out;
}

}  // namespace nitro::test
