#include "gpu/prefill_stager.h"

#include "core/error.h"
#include "cpu/thread_pool.h"
#include "cuda/check.h"
#include "cuda/context.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

#include <unistd.h>

namespace nitro::cuda {

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }
constexpr size_t kAlign = 256;
constexpr size_t kFillChunk = 1u << 20;  // bytes one fill unit copies

}  // namespace

size_t PrefillStager::part_offset(std::span<const Part> parts, size_t i) {
    size_t off = 0;
    for (size_t k = 0; k < i; ++k) off += (parts[k].bytes + kAlign - 1) / kAlign * kAlign;
    return off;
}

PrefillStager::PrefillStager(DeviceAllocator& alloc, size_t slot_bytes, int n_slots, int n_buffers, int n_threads, int max_pinned)
    : slot_bytes_(slot_bytes) {
    if (n_slots < 1 || n_buffers < 1 || slot_bytes == 0) fail("prefill staging needs at least one slot and one buffer");
    NITRO_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    uint8_t* arena = static_cast<uint8_t*>(alloc.alloc(slot_bytes * static_cast<size_t>(n_slots), "prompt staging slots"));
    for (int i = 0; i < n_slots; ++i) slots_.push_back(arena + static_cast<size_t>(i) * slot_bytes);
    for (int i = 0; i < n_buffers; ++i) {
        void* p = nullptr;
        const bool capped = max_pinned >= 0 && i >= max_pinned;
        // Cached (not write-combined) pinned memory: memcpy fills it at least as fast (MEASURED on the
        // lent H200 host: 20.3 / 38.8 / 46.8 GB/s with 4 / 8 / 16 threads against 19.6 / 38.3 / 39.9
        // write-combined) and the DMA reads both at 54 GB/s (docs/hybrid.md "Prompts").
        if (!capped && cudaHostAlloc(&p, slot_bytes, cudaHostAllocPortable) == cudaSuccess) {
            bufs_.push_back(static_cast<uint8_t*>(p));
            continue;
        }
        if (!capped) cudaGetLastError();  // clear the sticky error of the failed allocation
        pageable_.push_back(std::make_unique<uint8_t[]>(slot_bytes));
        bufs_.push_back(pageable_.back().get());
    }
    if (!pageable_.empty()) {
        pinned_ = false;
        std::fprintf(stderr,
                     "warning: prompt staging: pinned %zu of %d buffers (%.1f MiB each); the others are pageable, so staged "
                     "experts cross PCIe more slowly\n",
                     bufs_.size() - pageable_.size(), n_buffers, slot_bytes / 1048576.0);
    }
    auto make = [](std::vector<cudaEvent_t>& v, size_t n, unsigned flags) {
        for (size_t i = 0; i < n; ++i) {
            cudaEvent_t e = nullptr;
            NITRO_CUDA_CHECK(cudaEventCreateWithFlags(&e, flags));
            v.push_back(e);
        }
    };
    make(buf_free_, bufs_.size(), cudaEventDisableTiming);
    make(slot_free_, slots_.size(), cudaEventDisableTiming);
    buf_used_.assign(bufs_.size(), false);
    slot_used_.assign(slots_.size(), false);
    team_ = std::make_unique<cpu::ThreadPool>(std::max(1, n_threads));
}

PrefillStager::~PrefillStager() {
    if (stream_) cudaStreamSynchronize(stream_);  // copies in flight read the buffers
    for (const auto& [b, e] : in_place_) cudaHostUnregister(reinterpret_cast<void*>(b));
    for (auto* v : {&buf_free_, &slot_free_, &ev_reach_, &ev_ready_})
        for (cudaEvent_t e : *v) cudaEventDestroy(e);
    for (size_t i = 0; i < bufs_.size(); ++i) {
        const bool pageable = std::any_of(pageable_.begin(), pageable_.end(), [&](const auto& p) { return p.get() == bufs_[i]; });
        if (!pageable) cudaFreeHost(bufs_[i]);
    }
    if (stream_) cudaStreamDestroy(stream_);
}

void PrefillStager::fill(uint8_t* dst, std::span<const Part> parts, uint8_t* also_to, int threads) {
    // Units of kFillChunk bytes over all parts; each unit copies its piece to the slot layout
    // (parts at 256-byte aligned offsets) and, with also_to, to the back-to-back layout of a
    // copy-on-compute buffer.
    std::vector<size_t> first(parts.size() + 1, 0), slot_off(parts.size(), 0), packed_off(parts.size(), 0);
    for (size_t k = 0; k < parts.size(); ++k) {
        first[k + 1] = first[k] + (parts[k].bytes + kFillChunk - 1) / kFillChunk;
        slot_off[k] = part_offset(parts, k);
        packed_off[k] = k == 0 ? 0 : packed_off[k - 1] + parts[k - 1].bytes;
    }
    team_->parallel_for(static_cast<int64_t>(first.back()), 1, [&](int64_t b, int64_t e, int) {
        for (int64_t u = b; u < e; ++u) {
            const size_t k = static_cast<size_t>(std::upper_bound(first.begin(), first.end(), static_cast<size_t>(u)) - first.begin()) - 1;
            const size_t off = (static_cast<size_t>(u) - first[k]) * kFillChunk;
            const size_t n = std::min(kFillChunk, parts[k].bytes - off);
            std::memcpy(dst + slot_off[k] + off, parts[k].src + off, n);
            if (also_to) std::memcpy(also_to + packed_off[k] + off, parts[k].src + off, n);
        }
    }, threads);
}

size_t PrefillStager::pin_in_place(const uint8_t* begin, size_t bytes) {
    if (pin_refused_) return 0;
    const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    const uintptr_t b = (reinterpret_cast<uintptr_t>(begin) + page - 1) / page * page;
    const uintptr_t e = (reinterpret_cast<uintptr_t>(begin) + bytes) / page * page;
    if (e <= b) return 0;
    // Read-only: the file is mapped without write access (core/mapped_file.h).
    const cudaError_t err = cudaHostRegister(reinterpret_cast<void*>(b), e - b, cudaHostRegisterPortable | cudaHostRegisterReadOnly);
    if (err != cudaSuccess) {
        cudaGetLastError();  // clear the error of the refused registration
        pin_refused_ = true;
        std::fprintf(stderr,
                     "warning: --prefill-pin: the driver refused to pin %.1f MiB of the model file in place (%s); %.2f GiB stay "
                     "pinned, every other staged expert is filled into the pinned ring as without --prefill-pin\n",
                     static_cast<double>(e - b) / 1048576.0, cudaGetErrorString(err), pinned_in_place_ / 1073741824.0);
        return 0;
    }
    in_place_.insert(std::upper_bound(in_place_.begin(), in_place_.end(), std::pair{b, e}), {b, e});
    pinned_in_place_ += e - b;
    return e - b;
}

bool PrefillStager::in_place(std::span<const Part> parts) const {
    if (in_place_.empty()) return false;
    for (const Part& p : parts) {
        const uintptr_t b = reinterpret_cast<uintptr_t>(p.src), e = b + p.bytes;
        // the last registered range starting at or before b must reach e
        auto it = std::upper_bound(in_place_.begin(), in_place_.end(), std::pair{b, ~uintptr_t{0}});
        if (it == in_place_.begin() || std::prev(it)->second < e) return false;
    }
    return true;
}

const uint8_t* PrefillStager::stage(std::span<const Part> parts, uint8_t* also_to, cudaStream_t compute, int fill_threads) {
    const size_t need = part_offset(parts, parts.size());
    if (need > slot_bytes_) fail("prompt staging: an expert of {} bytes does not fit a {}-byte slot", need, slot_bytes_);
    const size_t p = next_ % slots_.size();
    if (!also_to && in_place(parts)) {
        // Straight from the registered file pages into the slot: no buffer, no fill.
        ++next_;
        if (slot_used_[p]) NITRO_CUDA_CHECK(cudaStreamWaitEvent(stream_, slot_free_[p], 0));  // its previous GEMMs ran
        for (size_t k = 0; k < parts.size(); ++k)
            NITRO_CUDA_CHECK(cudaMemcpyAsync(slots_[p] + part_offset(parts, k), parts[k].src, parts[k].bytes, cudaMemcpyHostToDevice,
                                             stream_));
        ++stats_.in_place_experts;
        for (const Part& q : parts) stats_.in_place_bytes += q.bytes;
    } else {
        const size_t b = next_ % bufs_.size();
        ++next_;
        auto t0 = Clock::now();
        if (buf_used_[b]) NITRO_CUDA_CHECK(cudaEventSynchronize(buf_free_[b]));  // its previous copy has read it
        stats_.buffer_wait_ms += ms_since(t0);
        t0 = Clock::now();
        fill(bufs_[b], parts, also_to, fill_threads);
        stats_.fill_ms += ms_since(t0);
        if (slot_used_[p]) NITRO_CUDA_CHECK(cudaStreamWaitEvent(stream_, slot_free_[p], 0));  // its previous GEMMs ran
        NITRO_CUDA_CHECK(cudaMemcpyAsync(slots_[p], bufs_[b], need, cudaMemcpyHostToDevice, stream_));
        NITRO_CUDA_CHECK(cudaEventRecord(buf_free_[b], stream_));
        buf_used_[b] = true;
    }
    if (n_timed_ == ev_ready_.size()) {
        cudaEvent_t a = nullptr, r = nullptr;
        NITRO_CUDA_CHECK(cudaEventCreate(&a));
        NITRO_CUDA_CHECK(cudaEventCreate(&r));
        ev_reach_.push_back(a);
        ev_ready_.push_back(r);
    }
    NITRO_CUDA_CHECK(cudaEventRecord(ev_ready_[n_timed_], stream_));
    NITRO_CUDA_CHECK(cudaEventRecord(ev_reach_[n_timed_], compute));
    NITRO_CUDA_CHECK(cudaStreamWaitEvent(compute, ev_ready_[n_timed_], 0));
    ++n_timed_;
    ++stats_.experts;
    stats_.bytes += need;
    last_slot_ = static_cast<int>(p);
    return slots_[p];
}

void PrefillStager::release(cudaStream_t compute) {
    if (last_slot_ < 0) return;
    NITRO_CUDA_CHECK(cudaEventRecord(slot_free_[static_cast<size_t>(last_slot_)], compute));
    slot_used_[static_cast<size_t>(last_slot_)] = true;
    last_slot_ = -1;
}

double PrefillStager::take_gpu_wait_ms() {
    double ms = 0;
    for (size_t i = 0; i < n_timed_; ++i) {
        float t = 0;
        // compute reached the wait at ev_reach; the copy was done at ev_ready: it waited the difference.
        if (cudaEventElapsedTime(&t, ev_reach_[i], ev_ready_[i]) == cudaSuccess) ms += std::max(0.f, t);
        else cudaGetLastError();
    }
    n_timed_ = 0;
    return ms;
}

double PrefillStager::measure_copy_gb_s(size_t bytes) {
    bytes = std::min(bytes, slot_bytes_);
    cudaEvent_t a = nullptr, b = nullptr;
    NITRO_CUDA_CHECK(cudaEventCreate(&a));
    NITRO_CUDA_CHECK(cudaEventCreate(&b));
    NITRO_CUDA_CHECK(cudaStreamSynchronize(stream_));
    std::memset(bufs_[0], 0, bytes);
    double best = 0;
    for (int i = 0; i < 4; ++i) {
        NITRO_CUDA_CHECK(cudaEventRecord(a, stream_));
        NITRO_CUDA_CHECK(cudaMemcpyAsync(slots_[0], bufs_[0], bytes, cudaMemcpyHostToDevice, stream_));
        NITRO_CUDA_CHECK(cudaEventRecord(b, stream_));
        NITRO_CUDA_CHECK(cudaEventSynchronize(b));
        float ms = 0;
        NITRO_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
        if (i > 0 && ms > 0) best = std::max(best, static_cast<double>(bytes) / (ms * 1e6));
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return best;
}

double PrefillStager::measure_fill_gb_s(std::span<const std::vector<Part>> samples, int fill_threads) {
    size_t bytes = 0;
    double ms = 0;
    for (const std::vector<Part>& parts : samples) {
        const size_t need = part_offset(parts, parts.size());
        if (need > slot_bytes_) fail("prompt staging: an expert of {} bytes does not fit a {}-byte slot", need, slot_bytes_);
        const auto t0 = Clock::now();
        fill(bufs_[0], parts, nullptr, fill_threads);
        ms += ms_since(t0);
        for (const Part& p : parts) bytes += p.bytes;
    }
    return ms > 0 ? static_cast<double>(bytes) / (ms * 1e6) : 0.0;
}

}  // namespace nitro::cuda
