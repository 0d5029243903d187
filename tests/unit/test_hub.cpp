// src/hub without a network: `-hf` specs, which GGUF files llama.cpp's rules pick (expected values
// worked out by hand from common/download.cpp's find_best_model / get_split_files on real
// repository layouts), the cache layout huggingface_hub documents, and the download lock.
// The downloads themselves are tested end to end in tests/hub (a local stand-in for the Hub).
#include "gguf_bytes.h"
#include "hub/hf_cache.h"
#include "hub/model_pick.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

namespace nitro {
namespace {

using hub::ModelRef;
using hub::RepoFile;

std::vector<RepoFile> files(std::initializer_list<const char*> paths) {
    std::vector<RepoFile> v;
    for (const char* p : paths) v.push_back({p, 1, "", ""});
    return v;
}

std::vector<std::string> pick(const std::vector<RepoFile>& fs, const std::string& spec) {
    std::vector<std::string> out;
    for (const RepoFile& f : hub::pick_model_files(fs, hub::parse_model_ref(spec), "repo")) out.push_back(f.path);
    return out;
}

TEST(HubModelRef, ParsesRepoQuantAndFile) {
    ModelRef r = hub::parse_model_ref("ggml-org/gpt-oss-20b-GGUF");
    EXPECT_EQ(r.repo, "ggml-org/gpt-oss-20b-GGUF");
    EXPECT_EQ(r.quant, "");
    EXPECT_EQ(r.file, "");
    r = hub::parse_model_ref("unsloth/Qwen3-30B-A3B-GGUF:UD-Q4_K_XL");
    EXPECT_EQ(r.repo, "unsloth/Qwen3-30B-A3B-GGUF");
    EXPECT_EQ(r.quant, "UD-Q4_K_XL");
    r = hub::parse_model_ref("unsloth/Qwen3-235B-A22B-GGUF:Q4_K_M/Qwen3-235B-A22B-Q4_K_M-00001-of-00003.gguf");
    EXPECT_EQ(r.file, "Q4_K_M/Qwen3-235B-A22B-Q4_K_M-00001-of-00003.gguf");
    EXPECT_EQ(r.text(), "unsloth/Qwen3-235B-A22B-GGUF:Q4_K_M/Qwen3-235B-A22B-Q4_K_M-00001-of-00003.gguf");

    const std::pair<const char*, const char*> bad[] = {
        {"gpt-oss-20b", "'gpt-oss-20b' is not a Hugging Face repository: expected OWNER/NAME[:QUANT]"},
        {"a/b/c", "'a/b/c' is not a Hugging Face repository"},
        {"-a/b", "'-a/b' is not a Hugging Face repository"},
        {"a//b", "'a//b' is not a Hugging Face repository"},
        {"a/b:", "'a/b:': nothing after ':'"},
        {"a/b:Q4 K", "'a/b:Q4 K': 'Q4 K' is not a quant name"},
        {"a/b:../x.gguf", "'a/b:../x.gguf': '../x.gguf' is not a file path inside a repository"},
        {"https://huggingface.co/a/b", "is not a Hugging Face repository"},
    };
    for (const auto& [spec, msg] : bad) EXPECT_NE(test::error_of([&] { hub::parse_model_ref(spec); }).find(msg), std::string::npos) << spec;
}

TEST(HubModelPick, GgufNamesAsLlamaCppSplitsThem) {
    hub::GgufName n = hub::parse_gguf_name("Q4_K_M/Qwen3-235B-A22B-Q4_K_M-00002-of-00003.gguf");
    EXPECT_TRUE(n.gguf);
    EXPECT_EQ(n.prefix, "Q4_K_M/Qwen3-235B-A22B-Q4_K_M");
    EXPECT_EQ(n.tag, "Q4_K_M");
    EXPECT_EQ(n.index, 2);
    EXPECT_EQ(n.count, 3);
    n = hub::parse_gguf_name("gpt-oss-20b-mxfp4.gguf");
    EXPECT_EQ(n.tag, "MXFP4");
    EXPECT_EQ(n.count, 1);
    EXPECT_EQ(hub::parse_gguf_name("Qwen3-30B-A3B-UD-Q4_K_XL.gguf").tag, "Q4_K_XL");
    EXPECT_EQ(hub::parse_gguf_name("model.Q8_0.gguf").tag, "Q8_0");
    EXPECT_EQ(hub::parse_gguf_name("model.gguf").tag, "");
    EXPECT_FALSE(hub::parse_gguf_name("model.safetensors").gguf);
}

TEST(HubModelPick, DefaultIsQ4KMThenQ8_0ThenTheFirstModelGguf) {
    // unsloth-style: several quants, a projector first in the listing
    const auto unsloth = files({"README.md", "mmproj-F16.gguf", "Qwen3-30B-A3B-Q2_K.gguf", "Qwen3-30B-A3B-Q4_K_M.gguf",
                                "Qwen3-30B-A3B-Q8_0.gguf", "Qwen3-30B-A3B-UD-Q4_K_XL.gguf"});
    EXPECT_EQ(pick(unsloth, "u/r"), std::vector<std::string>{"Qwen3-30B-A3B-Q4_K_M.gguf"});
    EXPECT_EQ(pick(files({"m-Q2_K.gguf", "m-Q8_0.gguf"}), "u/r"), std::vector<std::string>{"m-Q8_0.gguf"});
    // ggml-org/gpt-oss-20b-GGUF has one MXFP4 file: no Q4_K_M, no Q8_0, so the first model GGUF
    EXPECT_EQ(pick(files({".gitattributes", "README.md", "gpt-oss-20b-mxfp4.gguf"}), "u/r"),
              std::vector<std::string>{"gpt-oss-20b-mxfp4.gguf"});
    // projector, imatrix and draft files are never the model
    EXPECT_EQ(pick(files({"imatrix.gguf", "mmproj-model-f16.gguf", "mtp-model.gguf", "z-model-BF16.gguf"}), "u/r"),
              std::vector<std::string>{"z-model-BF16.gguf"});
}

TEST(HubModelPick, QuantMatchesTheTagFollowedByDotOrDashInAnyCase) {
    const auto unsloth = files({"Qwen3-30B-A3B-Q4_K_M.gguf", "Qwen3-30B-A3B-Q4_K_S.gguf", "Qwen3-30B-A3B-UD-Q4_K_XL.gguf"});
    EXPECT_EQ(pick(unsloth, "u/r:q4_k_s"), std::vector<std::string>{"Qwen3-30B-A3B-Q4_K_S.gguf"});
    EXPECT_EQ(pick(unsloth, "u/r:UD-Q4_K_XL"), std::vector<std::string>{"Qwen3-30B-A3B-UD-Q4_K_XL.gguf"});
    EXPECT_EQ(pick(unsloth, "u/r:Q4_K_XL"), std::vector<std::string>{"Qwen3-30B-A3B-UD-Q4_K_XL.gguf"});
    // "Q4_K" is followed by '_' in every name: no match (llama.cpp's "Q4_K[.-]")
    const std::string e = test::error_of([&] { pick(unsloth, "u/r:Q4_K"); });
    EXPECT_NE(e.find("repo has no GGUF file for quant 'Q4_K'; its quants: Q4_K_M, Q4_K_S, Q4_K_XL (e.g. u/r:Q4_K_M); "
                     "its GGUF files: Qwen3-30B-A3B-Q4_K_M.gguf, Qwen3-30B-A3B-Q4_K_S.gguf, Qwen3-30B-A3B-UD-Q4_K_XL.gguf"),
              std::string::npos)
        << e;
}

TEST(HubModelPick, SplitModelsBringEveryShardFirstShardFirst) {
    // unsloth/Qwen3-235B-A22B-GGUF keeps big quants in a folder each, split in shards
    const auto big = files({"Q4_K_M/Qwen3-235B-A22B-Q4_K_M-00002-of-00003.gguf", "Q4_K_M/Qwen3-235B-A22B-Q4_K_M-00001-of-00003.gguf",
                            "Q4_K_M/Qwen3-235B-A22B-Q4_K_M-00003-of-00003.gguf", "Q8_0/Qwen3-235B-A22B-Q8_0-00001-of-00006.gguf",
                            "Qwen3-235B-A22B-Q2_K.gguf"});
    const std::vector<std::string> q4 = {"Q4_K_M/Qwen3-235B-A22B-Q4_K_M-00001-of-00003.gguf",
                                         "Q4_K_M/Qwen3-235B-A22B-Q4_K_M-00002-of-00003.gguf",
                                         "Q4_K_M/Qwen3-235B-A22B-Q4_K_M-00003-of-00003.gguf"};
    EXPECT_EQ(pick(big, "u/r"), q4);
    EXPECT_EQ(pick(big, "u/r:Q4_K_M"), q4);
    // naming a later shard brings the whole model, first shard first
    EXPECT_EQ(pick(big, "u/r:Q4_K_M/Qwen3-235B-A22B-Q4_K_M-00002-of-00003.gguf"), q4);
    // a file name is compared in any case
    EXPECT_EQ(pick(big, "u/r:qwen3-235b-a22b-q2_k.gguf"), std::vector<std::string>{"Qwen3-235B-A22B-Q2_K.gguf"});
    const std::string e = test::error_of([&] { pick(big, "u/r:Q8_0"); });
    EXPECT_NE(e.find("repo: the split model Q8_0/Qwen3-235B-A22B-Q8_0-*-of-00006.gguf is missing 5 of its 6 shards: "
                     "Q8_0/Qwen3-235B-A22B-Q8_0-00002-of-00006.gguf"),
              std::string::npos)
        << e;
}

TEST(HubModelPick, RepositoriesWithoutGgufAndUnknownFilesSayWhatIsThere) {
    std::string e = test::error_of([&] { pick(files({"config.json", "model.safetensors"}), "Qwen/Qwen3-30B-A3B"); });
    EXPECT_NE(e.find("repo has no GGUF model file (nitro runs GGUF; look for a GGUF conversion, often a repository named "
                     "...-GGUF); its files: config.json, model.safetensors"),
              std::string::npos)
        << e;
    e = test::error_of([&] { pick(files({"a-Q8_0.gguf"}), "u/r:b.gguf"); });
    EXPECT_NE(e.find("repo has no file 'b.gguf'; its GGUF files: a-Q8_0.gguf (or name a quant: e.g. u/r:Q8_0)"), std::string::npos) << e;
}

TEST(HubCache, LayoutIsHuggingfaceHubs) {
    namespace fs = std::filesystem;
    const fs::path cache = test::temp_dir("hub-cache");
    const hub::RepoCache c(cache, "ggml-org/gpt-oss-20b-GGUF");
    const std::string commit = "0123456789abcdef0123456789abcdef01234567", oid(64, 'a');
    EXPECT_EQ(c.dir(), cache / "models--ggml-org--gpt-oss-20b-GGUF");
    EXPECT_EQ(c.incomplete(oid), c.dir() / "blobs" / (oid + ".incomplete"));
    EXPECT_EQ(c.lock_path(oid), cache / ".locks" / "models--ggml-org--gpt-oss-20b-GGUF" / (oid + ".lock"));
    EXPECT_EQ(c.ref("main"), "");
    c.set_ref(commit);
    std::ifstream ref(c.dir() / "refs" / "main");
    EXPECT_EQ(std::string(std::istreambuf_iterator<char>(ref), {}), commit);  // no newline
    EXPECT_EQ(c.ref("main"), commit);

    fs::create_directories(c.blob(oid).parent_path());
    std::ofstream(c.blob(oid)) << "hello";
    c.link(commit, "Q4_K_M/x-Q4_K_M.gguf", oid);
    c.link(commit, "y.gguf", oid);
    // huggingface_hub's documented layout: README.md -> ../../blobs/OID (one more ../ per folder)
    EXPECT_EQ(fs::read_symlink(c.snapshot(commit, "y.gguf")), fs::path("../../blobs") / oid);
    EXPECT_EQ(fs::read_symlink(c.snapshot(commit, "Q4_K_M/x-Q4_K_M.gguf")), fs::path("../../../blobs") / oid);
    const std::vector<RepoFile> listed = c.snapshot_files(commit);
    ASSERT_EQ(listed.size(), 2u);
    EXPECT_EQ(listed[0].path, "Q4_K_M/x-Q4_K_M.gguf");
    EXPECT_EQ(listed[0].size, 5u);
    // a dangling link (its blob deleted) is not a cached file
    c.link(commit, "z.gguf", std::string(64, 'b'));
    EXPECT_EQ(c.snapshot_files(commit).size(), 2u);
}

TEST(HubCache, FileLockWaitsForTheHolder) {
    const std::string path = test::temp_dir("hub-lock") + "/x.lock";
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::flock(fd, LOCK_EX), 0);  // another process's lock, as py-filelock takes it
    std::atomic<bool> waited{false}, locked{false};
    std::thread t([&] {
        hub::FileLock lock(path, [&] { waited = true; });
        locked = true;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    EXPECT_TRUE(waited);
    EXPECT_FALSE(locked);
    ::close(fd);  // releases it
    t.join();
    EXPECT_TRUE(locked);
}

}  // namespace
}  // namespace nitro
