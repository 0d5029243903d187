#include "runtime/default_model.h"

#include "core/error.h"

#include <filesystem>
#include <vector>

namespace nitro {

namespace {
constexpr const char* kDefaultModelFile = "models/tiny-moe-pystd.gguf";

/// Where a file of the checkout may be: next to the binary (`<exe>/../F`, `<exe>/../../F`), then
/// the source tree the binary was built from.
std::vector<std::filesystem::path> checkout_candidates(const std::string& relative) {
    namespace fs = std::filesystem;
    std::vector<fs::path> candidates;
    std::error_code ec;
    const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    if (!ec) {
        candidates.push_back(exe.parent_path().parent_path() / relative);
        candidates.push_back(exe.parent_path().parent_path().parent_path() / relative);
    }
#ifdef NITRO_SOURCE_DIR_DEFAULT
    candidates.push_back(fs::path(NITRO_SOURCE_DIR_DEFAULT) / relative);
#endif
    return candidates;
}
}  // namespace

std::string find_in_checkout(const std::string& relative, std::string* looked) {
    std::error_code ec;
    for (const auto& c : checkout_candidates(relative)) {
        if (std::filesystem::is_regular_file(c, ec)) return c.lexically_normal().string();
        if (looked) *looked += (looked->empty() ? "" : ", ") + c.lexically_normal().string();
    }
    return "";
}

std::string default_model_path() {
    std::string looked;
    std::string p = find_in_checkout(kDefaultModelFile, &looked);
    if (p.empty()) fail("no model given (-m MODEL.gguf) and the default model was not found (looked at: {})", looked);
    return p;
}

}  // namespace nitro
