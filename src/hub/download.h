// One file from the Hub into its blob: appended to BLOB.incomplete (an earlier, interrupted
// download is continued with "Range: bytes=N-"), retried with a doubling wait when the connection
// breaks, checked against the size and SHA-256 the Hub lists, then renamed to BLOB. A checksum
// mismatch removes the partial file, so the next attempt starts clean.
#pragma once

#include "hub/hub.h"

#include <cstdint>
#include <filesystem>
#include <string>

namespace nitro::hub {

struct BlobDownload {
    std::string url;                    ///< GET ENDPOINT/REPO/resolve/COMMIT/FILE
    std::string repo, file;             ///< for messages
    uint64_t size = 0;                  ///< bytes the Hub lists
    std::string sha256;                 ///< expected digest ("" = a non-LFS file: the size is checked)
    std::filesystem::path incomplete;   ///< BLOB.incomplete
    std::filesystem::path blob;         ///< where the checked file goes
};

/// Downloads `d` and returns the bytes fetched over the network (the resumed part not counted).
/// Throws nitro::Error: HTTP errors (fail_http), a transfer still broken after cfg.retries
/// attempts (the partial file is kept: run again to resume), a size or checksum mismatch.
uint64_t download_blob(const BlobDownload& d, const HubConfig& cfg);

}  // namespace nitro::hub
