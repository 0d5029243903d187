#include "gguf_bytes.h"

#include <filesystem>
#include <unistd.h>

namespace nitro::test {

std::string temp_dir(const std::string& tag) {
    namespace fs = std::filesystem;
    fs::path p = fs::temp_directory_path() / ("nitro-test-" + std::to_string(::getpid()) + "-" + tag);
    fs::remove_all(p);
    fs::create_directories(p);
    return p.string();
}

}  // namespace nitro::test
