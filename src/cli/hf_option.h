// -hf/--hf-repo OWNER/NAME[:QUANT] on every command that takes -m (run, serve, bench, plan), as
// llama.cpp spells it: the model comes from Hugging Face, downloaded into the Hugging Face cache
// the first time (src/hub/hub.h) and opened from there afterwards.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace nitro::cli {

/// Adds --hf-repo (main.cpp turns llama.cpp's "-hf" into it) storing into `spec`.
void add_hf_option(CLI::App* sub, std::string& spec);

/// With a -hf spec: pulls the model and sets `model` to its file (the first shard). -m and -hf
/// together are an error, unless the -m value came from NITRO_MODEL (then -hf wins). Throws
/// nitro::Error.
void resolve_hf_model(const std::string& spec, std::string& model);

}  // namespace nitro::cli
