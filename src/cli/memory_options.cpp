#include "cli/memory_options.h"

#include "core/mapped_file.h"

namespace nitro::cli {

void add_memory_flags(CLI::App* sub, MemoryFlags& f) {
    sub->add_flag("--no-mmap", f.no_mmap,
                  "Read the model into anonymous memory (huge pages where allowed) instead of mapping the file: "
                  "slower start, no page faults from the file later")
        ->envname("NITRO_NO_MMAP");
    sub->add_flag("--mlock", f.mlock,
                  "Lock the model in RAM so the OS cannot drop its pages (needs `ulimit -l` >= the model; "
                  "a refusal is reported and the model used unlocked)")
        ->envname("NITRO_MLOCK");
    sub->add_option("--hugepages", f.huge_pages,
                    "Huge pages for the model: thp (transparent, madvise: anonymous copies, and the file mapping "
                    "where the kernel supports it), explicit (hugetlbfs pool, implies --no-mmap), off")
        ->capture_default_str()
        ->check(CLI::IsMember({"thp", "explicit", "off"}))
        ->envname("NITRO_HUGEPAGES");
}

void apply_memory_flags(const MemoryFlags& f) {
    MapOptions o;
    o.no_mmap = f.no_mmap;
    o.mlock = f.mlock;
    o.huge_pages = parse_huge_pages(f.huge_pages);
    set_model_map_options(o);
}

}  // namespace nitro::cli
