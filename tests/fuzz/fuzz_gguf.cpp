// libFuzzer target for the GGUF reader: any byte string must either open (and then be fully
// walkable: metadata, tensor infos, model summary) or raise nitro::Error. Crashes, hangs, leaks,
// sanitizer reports and any other exception type are bugs. Each input goes through a file named
// after the process (the reader opens paths); it is removed after each input, since libFuzzer ends
// the process without running static destructors.
//
// Build: cmake -S . -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang -DNITRO_FUZZ=ON
// Run:   ./build-fuzz/tests/fuzz/fuzz_gguf -max_total_time=600 tests/fuzz/corpus
#include "arch/summary.h"
#include "core/error.h"
#include "gguf/gguf.h"

#include <unistd.h>

#include <cstdio>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const std::string path = "/tmp/nitro-fuzz-" + std::to_string(::getpid()) + ".gguf";
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) return 0;
    if (size) std::fwrite(data, 1, size, f);
    std::fclose(f);
    try {
        nitro::GgufModel m(path);
        volatile uint64_t sink = 0;
        for (const auto& t : m.tensors()) {
            sink = sink + t.n_bytes;
            if (t.n_bytes) sink = sink + t.data[0] + t.data[t.n_bytes - 1];  // bytes must be mapped
        }
        for (const auto& kv : m.metadata().entries()) sink = sink + kv.first.size();
        (void)nitro::summarize_model(m);
    } catch (const nitro::Error&) {
    }
    std::remove(path.c_str());
    return 0;
}
