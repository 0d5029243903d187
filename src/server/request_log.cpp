#include "server/request_log.h"

#include "core/text.h"

#include <fmt/format.h>

namespace nitro::server {

std::string request_log_line(const std::string& method, const std::string& path, int status, const JobStats* stats) {
    std::string s = fmt::format("{} {} {}", method, path, status);
    if (!stats) return s;
    s += fmt::format(" | prompt {} ({} cached) | completion {}", count_noun(stats->n_prompt, "token"), stats->n_reused,
                     count_noun(stats->n_generated, "token"));
    if (stats->n_generated > 0) s += fmt::format(" | TTFT {:.1f} ms", stats->queue_ms + stats->prompt_ms);
    // The first token comes from the prompt's pass; a rate needs a decode step after it.
    if (stats->n_generated > 1 && stats->decode_ms > 0)
        s += fmt::format(" | {:.1f} tok/s", 1000.0 * static_cast<double>(stats->n_generated - 1) / stats->decode_ms);
    s += fmt::format(" | {:.2f} s", (stats->queue_ms + stats->prompt_ms + stats->decode_ms) / 1000.0);
    return s;
}

}  // namespace nitro::server
