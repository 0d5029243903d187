// Negative control of check_isa_objects.sh (test isa_object_check_catches_load_time_code): an
// ISA-style file with both faults the check exists for. It is compiled, never linked or run.
#include <cstddef>
#include <vector>

namespace {
struct Table {
    float v[8];
    Table() {
        for (int i = 0; i < 8; ++i) v[i] = static_cast<float>(i) * 0.5f;  // dynamic initialiser
    }
};
const Table kTable;
}  // namespace

// An external function that instantiates std::vector<float> members (weak COMDAT symbols).
float bad_static_init_probe(int i) {
    std::vector<float> v(kTable.v, kTable.v + 8);
    v.push_back(1.0f);
    return v[static_cast<size_t>(i) % v.size()];
}
