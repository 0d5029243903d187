#include "runtime/route_trace.h"

#include "core/error.h"

#include <utility>
#include <vector>

namespace nitro {

void capture_routes(Engine& engine, TraceWriter& writer, std::function<uint32_t()> seq) {
    const bool ok = engine.set_route_callback(
        [&writer, seq = std::move(seq), ids = std::vector<ExpertId>()](const RouteEvent& e) mutable {
            ids.assign(e.experts.begin(), e.experts.end());
            TraceRecordIn rec;
            rec.seq = seq();
            rec.pos = static_cast<uint32_t>(e.pos);
            rec.phase = e.prefill ? TracePhase::Prefill : TracePhase::Decode;
            rec.layer = static_cast<uint32_t>(e.layer);
            rec.ids = ids;
            rec.weights = e.weights;
            writer.write(rec);
        });
    if (!ok) fail("--trace: routing capture is not available with this engine ({})", engine.describe());
}

}  // namespace nitro
