// Per-op timing of the decode graph (op_profile.h).
#include "gpu/op_profile.h"

#include "cuda/check.h"

#include <cstring>
#include <unordered_map>

namespace nitro::cuda {

void op_mark(cudaStream_t s, std::vector<OpMark>& marks, const char* op) {
    OpMark m{op, nullptr};
    NITRO_CUDA_CHECK(cudaEventCreate(&m.ev));
    // External: a real event-record node in the captured graph (a plain record during capture only
    // orders streams), so each launch of the graph stamps the time at this point.
    NITRO_CUDA_CHECK(cudaEventRecordWithFlags(m.ev, s, cudaEventRecordExternal));
    marks.push_back(m);
}

std::vector<int64_t> op_kernel_counts(cudaGraph_t graph, const std::vector<OpMark>& marks) {
    std::vector<int64_t> counts(marks.size(), -1);
    size_t nn = 0, ne = 0;
    NITRO_CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &nn));
    std::vector<cudaGraphNode_t> nodes(nn);
    NITRO_CUDA_CHECK(cudaGraphGetNodes(graph, nodes.data(), &nn));
    NITRO_CUDA_CHECK(cudaGraphGetEdges(graph, nullptr, nullptr, nullptr, &ne));
    std::vector<cudaGraphNode_t> from(ne), to(ne);
    std::vector<cudaGraphEdgeData> data(ne);  // (programmatic edges of PDL launches: a null here is refused as lossy)
    if (ne) NITRO_CUDA_CHECK(cudaGraphGetEdges(graph, from.data(), to.data(), data.data(), &ne));
    std::unordered_map<cudaGraphNode_t, cudaGraphNode_t> next;
    std::unordered_map<cudaGraphNode_t, int> in_degree;
    for (size_t i = 0; i < ne; ++i) {
        if (next.count(from[i])) return counts;  // a fork: not one chain
        next[from[i]] = to[i];
        ++in_degree[to[i]];
    }
    cudaGraphNode_t cur = nullptr;
    for (cudaGraphNode_t n : nodes)
        if (!in_degree.count(n)) {
            if (cur) return counts;  // two roots
            cur = n;
        }
    std::fill(counts.begin(), counts.end(), 0);
    int mark = -1;
    for (size_t walked = 0; cur && walked < nn; ++walked) {
        cudaGraphNodeType t;
        NITRO_CUDA_CHECK(cudaGraphNodeGetType(cur, &t));
        if (t == cudaGraphNodeTypeEventRecord) {
            cudaEvent_t ev = nullptr;
            NITRO_CUDA_CHECK(cudaGraphEventRecordNodeGetEvent(cur, &ev));
            for (size_t i = 0; i < marks.size(); ++i)
                if (marks[i].ev == ev) mark = static_cast<int>(i);
        } else if (t == cudaGraphNodeTypeKernel && mark >= 0) {
            ++counts[static_cast<size_t>(mark)];
        }
        auto it = next.find(cur);
        cur = it == next.end() ? nullptr : it->second;
    }
    return counts;
}

void op_accumulate(OpProfile& prof, const std::vector<OpMark>& marks, const std::vector<int64_t>& kernels) {
    if (marks.size() < 2) return;
    std::unordered_map<std::string, size_t> row;
    for (size_t i = 0; i < prof.rows.size(); ++i) row[prof.rows[i].op] = i;
    const bool first = prof.steps == 0;
    for (size_t i = 0; i + 1 < marks.size(); ++i) {
        if (!marks[i].op) continue;
        float ms = 0;
        NITRO_CUDA_CHECK(cudaEventElapsedTime(&ms, marks[i].ev, marks[i + 1].ev));
        auto it = row.find(marks[i].op);
        if (it == row.end()) {
            it = row.emplace(marks[i].op, prof.rows.size()).first;
            prof.rows.push_back(OpProfile::Row{marks[i].op, 0, 0, 0});
        }
        OpProfile::Row& r = prof.rows[it->second];
        r.ms += ms;
        if (first) {
            ++r.calls;
            r.kernels += kernels.size() == marks.size() && kernels[i] >= 0 ? kernels[i] : 0;
        }
    }
    float step = 0;
    NITRO_CUDA_CHECK(cudaEventElapsedTime(&step, marks.front().ev, marks.back().ev));
    prof.step_ms += step;
    ++prof.steps;
}

void op_marks_clear(std::vector<OpMark>& marks) {
    for (OpMark& m : marks)
        if (m.ev) cudaEventDestroy(m.ev);
    marks.clear();
}

}  // namespace nitro::cuda
