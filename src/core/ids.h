// Small identifiers shared by every layer of the code (the expert cache, traces, the simulator,
// the engines), so none of them has to include another's headers for a typedef.
#pragma once

#include <cstdint>

namespace nitro {

/// An expert index within one layer, 0 <= id < that layer's n_expert (n_expert < 65535).
using ExpertId = uint16_t;
/// "No expert": a free slot, or no victim.
inline constexpr ExpertId kNoExpert = 0xFFFF;

}  // namespace nitro
