// Live routing capture: the Engine's route callback turned into trace records (docs/trace-format.md).
#pragma once

#include "runtime/engine.h"
#include "trace/trace_file.h"

#include <cstdint>
#include <functional>

namespace nitro {

/// Sets `engine`'s route callback so every (token, layer) routing decision is written to
/// `writer` as one record: sequence id `seq(event)` (read at each event: the caller maps the
/// engine's sequence, RouteEvent::seq, to its own numbering), the token position, prefill
/// or decode, the layer, and the selected experts with their weights in router order. `writer`
/// must outlive the engine's use of the callback. Throws nitro::Error naming the engine if it
/// cannot report routing (`--trace` is then unavailable).
void capture_routes(Engine& engine, TraceWriter& writer, std::function<uint32_t(const RouteEvent&)> seq);

/// The callback capture_routes installs, for callers that combine it with their own: writes each
/// event to `writer` (which must outlive the callback) with sequence id `seq(event)`.
std::function<void(const RouteEvent&)> route_record_writer(TraceWriter& writer, std::function<uint32_t(const RouteEvent&)> seq);

}  // namespace nitro
