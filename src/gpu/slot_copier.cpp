#include "gpu/slot_copier.h"

#include "core/error.h"
#include "cuda/check.h"

#include <cstdio>

namespace nitro::cuda {

SlotCopier::SlotCopier(cudaStream_t stream, int want, size_t buffer_bytes, int max_pinned, int fail_every,
                       std::function<SlotDst(int, int)> dst)
    : stream_(stream), bytes_(buffer_bytes), fail_every_(fail_every), dst_(std::move(dst)) {
    for (int i = 0; i < want; ++i) {
        if (max_pinned >= 0 && i >= max_pinned) break;
        void* p = nullptr;
        // Write-combined: the CPU only writes these buffers (streaming stores combine), the DMA reads them.
        if (cudaHostAlloc(&p, buffer_bytes, cudaHostAllocPortable | cudaHostAllocWriteCombined) != cudaSuccess) {
            cudaGetLastError();  // clear the sticky error of the failed allocation
            break;
        }
        cudaEvent_t ev = nullptr;
        NITRO_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
        buf_.push_back(static_cast<uint8_t*>(p));
        ev_.push_back(ev);
    }
    injected_failure_.assign(buf_.size(), 0);
    if (static_cast<int>(buf_.size()) < want)
        std::fprintf(stderr,
                     "warning: pinned %zu of %d staging buffers (%.1f MiB each) for expert admissions; at most %zu experts "
                     "can be admitted per step%s\n",
                     buf_.size(), want, buffer_bytes / 1048576.0, buf_.size(),
                     buf_.empty() ? " (none: residency stays frozen)" : "");
}

SlotCopier::~SlotCopier() {
    // Copies still in flight read these buffers: wait for them before freeing.
    if (stream_) cudaStreamSynchronize(stream_);
    for (cudaEvent_t e : ev_) cudaEventDestroy(e);
    for (uint8_t* p : buf_) cudaFreeHost(p);
}

bool SlotCopier::submit(int buffer, int layer, int slot, ExpertId) {
    const size_t b = static_cast<size_t>(buffer);
    if (b >= buf_.size()) return false;
    const SlotDst d = dst_(layer, slot);
    size_t off = 0;
    for (int i = 0; i < 3; ++i) {
        if (off + d.bytes[i] > bytes_) return false;
        if (cudaMemcpyAsync(d.part[i], buf_[b] + off, d.bytes[i], cudaMemcpyHostToDevice, stream_) != cudaSuccess) {
            cudaGetLastError();
            return false;
        }
        off += d.bytes[i];
    }
    if (cudaEventRecord(ev_[b], stream_) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    ++copies_;
    injected_failure_[b] = fail_every_ > 0 && copies_ % static_cast<uint64_t>(fail_every_) == 0;
    return true;
}

CopyBackend::State SlotCopier::poll(int buffer) {
    const size_t b = static_cast<size_t>(buffer);
    if (b >= buf_.size()) return State::Failed;
    const cudaError_t e = cudaEventQuery(ev_[b]);
    if (e == cudaErrorNotReady) return State::Pending;
    if (e != cudaSuccess) {
        cudaGetLastError();
        return State::Failed;
    }
    return injected_failure_[b] ? State::Failed : State::Landed;
}

}  // namespace nitro::cuda
