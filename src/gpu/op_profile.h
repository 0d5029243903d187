// Where a decode step's GPU time goes, per op of the forward pass (issue 15's per-kernel table):
// timing events captured into the decode graph between forward_chunk's ops, so the step runs as
// it always does (one CUDA graph) and each op's time is the GPU time from its first launch to the
// next op's (launch gaps included). Off by default; GpuSession::set_op_profile turns it on
// (nitro_cuda_bench --ops).
#pragma once

#include "runtime/forward.h"

#include <cuda_runtime.h>

#include <string>
#include <vector>

namespace nitro::cuda {

/// Accumulated per-op figures of the decode steps run while profiling was on.
struct OpProfile {
    struct Row {
        std::string op;       ///< forward_chunk op name (runtime/forward.h): attn_norm, qkv, moe, ...
        double ms = 0;        ///< GPU time summed over every call in every profiled step, ms
        int64_t calls = 0;    ///< calls per step (one per layer for per-layer ops)
        int64_t kernels = 0;  ///< kernel launches of those calls per step (nodes of the decode graph)
    };
    std::vector<Row> rows;    ///< in the order the forward pass first calls each op
    int64_t steps = 0;        ///< profiled decode steps
    double step_ms = 0;       ///< GPU time of those steps from the first op to the end, summed, ms
};

/// One timing mark in a captured decode graph: `op` starts at `ev` (null op: the end of the step).
struct OpMark {
    const char* op = nullptr;
    cudaEvent_t ev = nullptr;
};

/// Records an external event node for `op` on capturing stream s (the event is created here).
void op_mark(cudaStream_t s, std::vector<OpMark>& marks, const char* op);

/// After a captured graph's instantiation: the kernel nodes between each mark and the next, walking
/// the graph from its root (a chain, as one stream captures it; -1 each if it is not a chain).
std::vector<int64_t> op_kernel_counts(cudaGraph_t graph, const std::vector<OpMark>& marks);

/// After a launch of that graph has completed: adds each op's time and the step's to `prof`
/// (rows by op name; `kernels` from op_kernel_counts, set once per op).
void op_accumulate(OpProfile& prof, const std::vector<OpMark>& marks, const std::vector<int64_t>& kernels);

/// Destroys the marks' events.
void op_marks_clear(std::vector<OpMark>& marks);

/// The executor B with a timing mark before each op of forward_chunk (same ops, same order).
template <class B>
struct TimedOps {
    B& b;
    cudaStream_t s;
    std::vector<OpMark>& marks;
#define NITRO_TIMED_OP(name)                     \
    void name(const ChunkArgs& c) {              \
        op_mark(s, marks, #name);                \
        b.name(c);                               \
    }
#define NITRO_TIMED_LAYER_OP(name)               \
    void name(int il, const ChunkArgs& c) {      \
        op_mark(s, marks, #name);                \
        b.name(il, c);                           \
    }
    NITRO_TIMED_OP(embed)
    NITRO_TIMED_OP(lm_head)
    NITRO_TIMED_LAYER_OP(attn_norm)
    NITRO_TIMED_LAYER_OP(ssm_in)
    NITRO_TIMED_LAYER_OP(ssm_conv)
    NITRO_TIMED_LAYER_OP(delta_net)
    NITRO_TIMED_LAYER_OP(ssm_out)
    NITRO_TIMED_LAYER_OP(qkv)
    NITRO_TIMED_LAYER_OP(rope_kv_store)
    NITRO_TIMED_LAYER_OP(attention)
    NITRO_TIMED_LAYER_OP(attn_out)
    NITRO_TIMED_LAYER_OP(ffn_norm)
    NITRO_TIMED_LAYER_OP(route)
    NITRO_TIMED_LAYER_OP(shared_expert)
    NITRO_TIMED_LAYER_OP(ffn_dense)
    NITRO_TIMED_LAYER_OP(moe)
#undef NITRO_TIMED_OP
#undef NITRO_TIMED_LAYER_OP
};

}  // namespace nitro::cuda
