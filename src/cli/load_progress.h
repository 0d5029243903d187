// Reading a model's weights once before the first request or prompt, so page faults from the
// file do not land in its TTFT, with progress on a terminal (nitro run, serve, chat).
#pragma once

#include "runtime/model.h"

namespace nitro::cli {

/// Touches every page of the weights (madvise WILLNEED first). On a terminal (`live`): a
/// progress line with rate and time left, then "loaded 12.00 GiB in 7.45 s". `summary`: that last
/// line even when not on a terminal (the server's startup log).
void prefault_weights(const Model& model, bool live, bool summary);

}  // namespace nitro::cli
