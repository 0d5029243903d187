// The memory flags of every command that opens a model (nitro run, serve, bench): how the GGUF
// bytes are held in RAM (core/mapped_file.h). One table, so the three commands say the same.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace nitro::cli {

struct MemoryFlags {
    bool no_mmap = false;
    bool mlock = false;
    std::string huge_pages = "thp";
};

/// Adds --no-mmap (NITRO_NO_MMAP), --mlock (NITRO_MLOCK) and --hugepages thp|explicit|off
/// (NITRO_HUGEPAGES) to `sub`.
void add_memory_flags(CLI::App* sub, MemoryFlags& f);
/// Makes the flags the options every model file is opened with (call before opening one).
void apply_memory_flags(const MemoryFlags& f);

}  // namespace nitro::cli
