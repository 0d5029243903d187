// A program compiled with -mavx2 -mfma -mf16c for the whole file and linked with
// src/cpu/cpu_features.cpp compiled the same way (tests/CMakeLists.txt): what a user's
// CMAKE_CXX_FLAGS=-march=native build is. On a CPU without those features it must exit 1 with
// cpu_features.cpp's message before main runs (tests/isa/emulated_cpus.sh), not die of SIGILL.
#include "cpu/cpu_features.h"

#include <cstdio>

int main() {
    std::printf("started; build requires: %s\n", nitro::cpu::build_baseline_features().c_str());
    return 0;
}
