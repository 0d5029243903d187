#include "gguf_bytes.h"

#include "core/error.h"

#include <cstdio>
#include <stdexcept>

#include <filesystem>
#include <mutex>
#include <unistd.h>
#include <vector>

namespace nitro::test {
namespace {

/// Folders made by temp_dir, removed when the test process exits (also after a failed ASSERT).
struct TempDirs {
    std::mutex mu;
    std::vector<std::filesystem::path> made;
    ~TempDirs() {
        std::error_code ec;
        for (const auto& p : made) std::filesystem::remove_all(p, ec);
    }
};
TempDirs& temp_dirs() {
    static TempDirs d;
    return d;
}

}  // namespace

std::string temp_dir(const std::string& tag) {
    namespace fs = std::filesystem;
    fs::path p = fs::temp_directory_path() / ("nitro-test-" + std::to_string(::getpid()) + "-" + tag);
    fs::remove_all(p);
    fs::create_directories(p);
    TempDirs& d = temp_dirs();
    std::lock_guard lock(d.mu);
    d.made.push_back(p);
    return p.string();
}

std::string run_command(const std::string& cmd) {
    std::string out;
    FILE* p = popen(cmd.c_str(), "r");
    if (!p) throw std::runtime_error("cannot run " + cmd);
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    const int rc = pclose(p);
    if (rc != 0) throw std::runtime_error("command failed (" + std::to_string(rc) + "): " + cmd + "\n" + out);
    return out;
}

std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

}  // namespace nitro::test
