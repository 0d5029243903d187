#include "runtime/default_model.h"

#include "core/error.h"

#include <filesystem>
#include <vector>

namespace nitro {

namespace {
constexpr const char* kDefaultModelFile = "models/tiny-moe-pystd.gguf";
}

std::string default_model_path() {
    namespace fs = std::filesystem;
    std::vector<fs::path> candidates;
    std::error_code ec;
    const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    if (!ec) {
        candidates.push_back(exe.parent_path().parent_path() / kDefaultModelFile);
        candidates.push_back(exe.parent_path().parent_path().parent_path() / kDefaultModelFile);
    }
#ifdef NITRO_SOURCE_DIR_DEFAULT
    candidates.push_back(fs::path(NITRO_SOURCE_DIR_DEFAULT) / kDefaultModelFile);
#endif
    std::string looked;
    for (const auto& c : candidates) {
        if (fs::is_regular_file(c, ec)) return c.lexically_normal().string();
        looked += (looked.empty() ? "" : ", ") + c.lexically_normal().string();
    }
    fail("no model given (-m MODEL.gguf) and the default model was not found (looked at: {})", looked);
}

}  // namespace nitro
