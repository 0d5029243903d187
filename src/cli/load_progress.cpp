#include "cli/load_progress.h"

#include "arch/summary.h"
#include "cli/progress.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace nitro::cli {

void prefault_weights(const Model& model, bool live, bool summary) {
    const uint64_t total = model.gguf().total_file_bytes();
    const long page = sysconf(_SC_PAGESIZE);
    ProgressLine progress("loading weights", live);
    uint64_t done = 0;
    volatile uint8_t sink = 0;
    for (const auto& shard : model.gguf().shards()) {
        const uint8_t* base = shard->mapping();
        const uint64_t size = shard->file_size();
        madvise(const_cast<uint8_t*>(base), size, MADV_WILLNEED);
        constexpr uint64_t step = 64ull << 20;
        for (uint64_t off = 0; off < size; off += step) {
            const uint64_t end = std::min(size, off + step);
            uint8_t acc = 0;
            for (uint64_t p = off; p < end; p += static_cast<uint64_t>(page)) acc ^= base[p];
            sink = sink ^ acc;
            done += end - off;
            progress.update(done, total);
        }
    }
    progress.finish();
    if (live || summary) std::fprintf(stderr, "loaded %s in %.2f s\n", format_bytes(total).c_str(), progress.elapsed_s());
}

}  // namespace nitro::cli
