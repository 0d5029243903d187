// Models from the Hugging Face Hub: `nitro pull REPO[:QUANT]` and `-hf REPO[:QUANT]`.
//
// pull() asks the Hub which files the repository has at `main` (GET /api/models/REPO/revision/main
// for the commit, GET /api/models/REPO/tree/COMMIT?recursive=true for paths, sizes and LFS SHA-256),
// picks the GGUF by llama.cpp's rules (model_pick.h), and downloads what the cache does not hold
// yet (GET /REPO/resolve/COMMIT/FILE) into huggingface_hub's cache layout (hf_cache.h): resumed from
// an interrupted download, checked against the SHA-256 the Hub lists, with a progress bar on a
// terminal. Without a network (HF_HUB_OFFLINE=1, or the Hub unreachable) it uses what is cached.
#pragma once

#include "hub/model_pick.h"

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace nitro::hub {

/// Where and how to reach the Hub. hub_config_from_env() reads the variables huggingface_hub reads.
struct HubConfig {
    std::string endpoint = "https://huggingface.co";  ///< HF_ENDPOINT (no trailing '/')
    std::filesystem::path cache_dir;                  ///< HF_HUB_CACHE, HF_HOME/hub, ~/.cache/huggingface/hub
    std::string token;                                ///< HF_TOKEN, else the file HF_TOKEN_PATH or HF_HOME/token
    std::string token_source;                         ///< where the token came from, for messages ("" = none)
    bool offline = false;                             ///< HF_HUB_OFFLINE=1: the cache only
    bool draw_progress = true;                        ///< a progress bar when stderr is a terminal
    int retries = 5;                                  ///< attempts after a broken transfer, each resuming
    double retry_wait_s = 1.0;                        ///< wait before the first retry, doubling each time
    std::function<void(const std::string&)> note;     ///< status lines (default: stderr)
};

/// The configuration the environment describes (HF_ENDPOINT, HF_HUB_CACHE, HF_HOME, XDG_CACHE_HOME,
/// HF_TOKEN, HF_TOKEN_PATH, HF_HUB_OFFLINE).
HubConfig hub_config_from_env();

struct PullResult {
    std::string path;                  ///< the model file to open: the first (or only) shard, in snapshots/
    std::vector<std::string> files;    ///< every file of the model, repository paths
    std::string commit;                ///< the snapshot
    uint64_t bytes = 0;                ///< size of all the files
    uint64_t downloaded = 0;           ///< bytes fetched by this call (0: all were cached)
    bool offline = false;              ///< resolved from the cache alone
};

/// Makes the model `ref` names present in the cache and returns where it is. Throws nitro::Error
/// with a message saying what to do: an unknown repository, quant or file (listing the ones there
/// are), 401/403 (set HF_TOKEN, accept the license), a checksum mismatch, a download cut off (run
/// again to resume), offline and not cached.
PullResult pull(const ModelRef& ref, const HubConfig& cfg);

/// `-hf SPEC` of run/serve/bench/plan and `nitro pull SPEC`: pull() with the environment's config.
PullResult pull(const std::string& spec);

}  // namespace nitro::hub
