// Tokenizer throughput, one thread: MB/s of Tokenizer::encode on a few MB of English prose and of
// C++ source code, for the gpt-oss (gpt-4o pre-tokenizer) and Qwen3 (qwen2, NFC) vocabularies
// from the GGUF fixtures; plus tokenizer load time and decode throughput.
//
// Corpora (deterministic, from files every Debian system has; override with environment
// variables NITRO_BENCH_ENGLISH / NITRO_BENCH_CODE naming a text file):
//   English: /usr/share/common-licenses/* then /usr/share/doc/*/copyright, sorted, to 4 MiB
//   code:    /usr/include/c++/<ver>/bits/*.h, sorted, to 4 MiB
// --write-corpus DIR writes both to DIR (english.txt, code.txt) so another tokenizer (llama.cpp
// through tools/bench/llama_tokenize_bench.mjs) can run on the same bytes.
#include "gguf/gguf.h"
#include "tokenizer/bpe.h"

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

namespace fs = std::filesystem;
using nitro::Tokenizer;

namespace {

constexpr size_t kCorpusBytes = 4u << 20;

std::string read_file(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

std::string gather(const std::vector<fs::path>& files) {
    std::string out;
    for (const auto& f : files) {
        if (out.size() >= kCorpusBytes) break;
        out += read_file(f);
        out += '\n';
    }
    if (out.size() > kCorpusBytes) {
        size_t cut = kCorpusBytes;  // cut on a character boundary
        while (cut > 0 && (static_cast<unsigned char>(out[cut]) & 0xC0) == 0x80) --cut;
        out.resize(cut);
    }
    return out;
}

std::vector<fs::path> sorted_files(const fs::path& dir, const std::string& name_or_ext, bool recurse_one) {
    std::vector<fs::path> r;
    std::error_code ec;
    if (!fs::exists(dir, ec)) return r;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
        if (recurse_one) {
            const fs::path f = e.path() / name_or_ext;
            if (fs::is_regular_file(f, ec)) r.push_back(f);
        } else if (e.is_regular_file() && (name_or_ext.empty() || e.path().extension() == name_or_ext)) {
            r.push_back(e.path());
        }
    }
    std::sort(r.begin(), r.end());
    return r;
}

const std::string& english() {
    static const std::string s = [] {
        if (const char* f = std::getenv("NITRO_BENCH_ENGLISH")) return read_file(f);
        auto files = sorted_files("/usr/share/common-licenses", "", false);
        auto more = sorted_files("/usr/share/doc", "copyright", true);
        files.insert(files.end(), more.begin(), more.end());
        return gather(files);
    }();
    return s;
}

const std::string& code() {
    static const std::string s = [] {
        if (const char* f = std::getenv("NITRO_BENCH_CODE")) return read_file(f);
        std::vector<fs::path> files;
        for (const char* v : {"14", "13", "12", "11"}) {
            files = sorted_files(std::string("/usr/include/c++/") + v + "/bits", ".h", false);
            if (!files.empty()) break;
        }
        return gather(files);
    }();
    return s;
}

std::string fixture(const std::string& family) {
    return std::string(NITRO_SHARED_DIR) + (family == "gptoss" ? "/fixtures/tiny-gptoss-mxfp4.gguf" : "/fixtures/tiny-qwen3moe-q8.gguf");
}

const Tokenizer& tokenizer(const std::string& family) {
    static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
    auto& t = cache[family];
    if (!t) {
        nitro::GgufModel m(fixture(family));
        t = std::make_unique<Tokenizer>(Tokenizer::from_gguf(m.metadata()));
    }
    return *t;
}

void BM_Encode(benchmark::State& state, const std::string& family, const std::string& (*corpus)()) {
    const Tokenizer& tok = tokenizer(family);
    const std::string& text = corpus();
    if (text.empty()) {
        state.SkipWithError("corpus is empty (set NITRO_BENCH_ENGLISH / NITRO_BENCH_CODE)");
        return;
    }
    size_t n_tokens = 0;
    for (auto _ : state) {
        auto ids = tok.encode(text);
        n_tokens = ids.size();
        benchmark::DoNotOptimize(ids.data());
    }
    state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
    state.counters["corpus_MiB"] = static_cast<double>(text.size()) / (1 << 20);
    state.counters["tokens"] = static_cast<double>(n_tokens);
    state.counters["bytes_per_token"] = static_cast<double>(text.size()) / static_cast<double>(n_tokens);
}

void BM_Decode(benchmark::State& state, const std::string& family) {
    const Tokenizer& tok = tokenizer(family);
    const auto ids = tok.encode(english());
    for (auto _ : state) benchmark::DoNotOptimize(tok.decode(ids));
    state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * english().size()));
}

void BM_Load(benchmark::State& state, const std::string& family) {
    for (auto _ : state) {
        nitro::GgufModel m(fixture(family));
        benchmark::DoNotOptimize(Tokenizer::from_gguf(m.metadata()));
    }
}

BENCHMARK_CAPTURE(BM_Encode, gptoss_english, std::string("gptoss"), &english)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Encode, gptoss_code, std::string("gptoss"), &code)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Encode, qwen3_english, std::string("qwen3"), &english)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Encode, qwen3_code, std::string("qwen3"), &code)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Decode, gptoss_english, std::string("gptoss"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Load, gptoss, std::string("gptoss"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Load, qwen3, std::string("qwen3"))->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
    for (int i = 1; i + 1 < argc; ++i) {
        if (std::strcmp(argv[i], "--write-corpus") == 0) {
            const fs::path dir = argv[i + 1];
            fs::create_directories(dir);
            std::ofstream(dir / "english.txt", std::ios::binary) << english();
            std::ofstream(dir / "code.txt", std::ios::binary) << code();
            std::printf("wrote %s/english.txt (%zu bytes) and code.txt (%zu bytes)\n", dir.c_str(), english().size(),
                        code().size());
            return 0;
        }
    }
    benchmark::Initialize(&argc, argv);
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
