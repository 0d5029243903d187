// The architectures this build knows, one line each (docs/architecture.md, "How to add an
// architecture"). Each is defined in its own file of src/arch.
#include "arch/arch.h"

namespace nitro {

extern const ArchInfo kArchGptOss;     // arch/gpt_oss.cpp
extern const ArchInfo kArchQwen3Moe;   // arch/qwen3moe.cpp
extern const ArchInfo kArchQwen3Next;  // arch/qwen3next.cpp
extern const ArchInfo kArchQwen35Moe;  // arch/qwen35moe.cpp

std::span<const ArchInfo* const> all_archs() {
    static const ArchInfo* const kArchs[] = {
        &kArchGptOss,
        &kArchQwen3Moe,
        &kArchQwen3Next,
        &kArchQwen35Moe,
    };
    return kArchs;
}

}  // namespace nitro
