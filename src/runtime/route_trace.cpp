#include "runtime/route_trace.h"

#include "core/error.h"

#include <utility>
#include <vector>

namespace nitro {

std::function<void(const RouteEvent&)> route_record_writer(TraceWriter& writer, std::function<uint32_t(const RouteEvent&)> seq) {
    return [&writer, seq = std::move(seq), ids = std::vector<ExpertId>()](const RouteEvent& e) mutable {
        ids.assign(e.experts.begin(), e.experts.end());
        TraceRecordIn rec;
        rec.seq = seq(e);
        rec.pos = static_cast<uint32_t>(e.pos);
        rec.phase = e.prefill ? TracePhase::Prefill : TracePhase::Decode;
        rec.layer = static_cast<uint32_t>(e.layer);
        rec.ids = ids;
        rec.weights = e.weights;
        writer.write(rec);
    };
}

void capture_routes(Engine& engine, TraceWriter& writer, std::function<uint32_t(const RouteEvent&)> seq) {
    if (!engine.set_route_callback(route_record_writer(writer, std::move(seq))))
        fail("--trace: routing capture is not available with this engine ({})", engine.describe());
}

}  // namespace nitro
