// The device context: everything one GPU engine owns on its device. No global streams or
// handles exist anywhere in src/cuda: kernels get a context (or its stream) as an argument.
//
//   - DeviceAllocator: every device allocation of the engine goes through it. It knows a budget
//     (--vram-budget, default: free memory minus a margin) and refuses to exceed it with a
//     nitro::Error that says what was being allocated, how much, and how much is left.
//   - streams: `compute` runs the forward pass; `copy` runs uploads (weights, expert slots).
//   - a cuBLAS handle bound to `compute`, for the dense f16 GEMMs of prefill.
//   - StagingRing: a bounded ring of pinned host buffers through which weights are uploaded from
//     the mmap'd file; if pinning fails it falls back to pageable copies (never a crash).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

typedef struct cublasContext* cublasHandle_t;

namespace nitro::cuda {

class DeviceAllocator {
public:
    /// budget_bytes: the most this allocator hands out in total.
    DeviceAllocator(int device, uint64_t budget_bytes);
    ~DeviceAllocator();
    DeviceAllocator(const DeviceAllocator&) = delete;
    DeviceAllocator& operator=(const DeviceAllocator&) = delete;

    /// Device memory of `bytes` (256-byte aligned), zero-initialised is NOT promised. Counted
    /// against the budget as the device reserves it (vram_alloc_size: large blocks in 2 MiB pages).
    /// Throws nitro::Error naming `what` when the budget (or the device) cannot hold it.
    void* alloc(uint64_t bytes, const std::string& what);
    /// free() of memory from an arena is ignored (the arena lives as long as the allocator).
    void free(void* p);
    /// Until end_arena(), alloc() hands out 256-byte aligned pieces of one block of `bytes` (one
    /// device allocation, one rounding to the driver's pages) instead of separate blocks; asking
    /// for more than the arena holds is a programming error. For the many tensors of the dense
    /// core, the K/V cache and the scratch buffers, whose separate 2 MiB roundings would waste
    /// hundreds of MiB of a small budget.
    void begin_arena(uint64_t bytes, const std::string& what);
    void end_arena();

    uint64_t budget() const { return budget_; }
    /// Lowers (or raises) the budget; `used()` may not be above it.
    void set_budget(uint64_t bytes);
    uint64_t used() const { return used_; }
    uint64_t peak() const { return peak_; }

private:
    int device_;
    uint64_t budget_, used_ = 0, peak_ = 0;
    std::vector<std::pair<void*, uint64_t>> live_;
    uint8_t* arena_ = nullptr;
    uint64_t arena_size_ = 0, arena_off_ = 0;
    std::string arena_what_;
};

/// A typed device buffer owned by an allocator (freed with it or explicitly).
template <typename T>
struct DevBuf {
    T* p = nullptr;
    size_t n = 0;
    T* data() const { return p; }
};

/// Bounded pinned staging ring for host -> device uploads.
class StagingRing {
public:
    /// `slots` buffers of `slot_bytes`. If cudaHostAlloc fails (or force_pageable), uploads
    /// use pageable cudaMemcpy instead; pinned() says which.
    StagingRing(cudaStream_t stream, size_t slot_bytes, int slots, bool force_pageable = false);
    ~StagingRing();
    /// Copies `bytes` from host `src` (e.g. the mmap'd file) to device `dst`, in slot-sized
    /// pieces: memcpy into a free pinned slot, async copy, event per slot.
    void upload(void* dst, const void* src, size_t bytes);
    /// Waits for every upload issued so far.
    void finish();
    bool pinned() const { return pinned_; }

private:
    cudaStream_t stream_;
    size_t slot_bytes_;
    bool pinned_ = false;
    std::vector<void*> bufs_;
    std::vector<cudaEvent_t> done_;
    int next_ = 0;
};

class NvmlMemory;

class DeviceContext {
public:
    /// Selects `device`, creates streams, events, cuBLAS (with a workspace from the allocator, so
    /// cuBLAS allocates nothing on its own). budget_gib <= 0: free memory minus a margin
    /// (max(512 MiB, 3% of the card)). The budget covers the whole process: what the CUDA runtime
    /// itself takes (context, cuBLAS, modules; measured with NVML when it is available, else
    /// ASSUMED kAssumedRuntimeOverhead) is subtracted before the allocator's share. Throws
    /// nitro::Error for a bad device index, a budget larger than the free memory, or one smaller
    /// than the runtime's own overhead.
    DeviceContext(int device, double budget_gib);
    /// What the CUDA runtime is assumed to take when NVML cannot measure it, bytes.
    static constexpr uint64_t kAssumedRuntimeOverhead = 400ull << 20;
    /// cuBLAS's workspace, allocated from the budget (cuBLAS recommends 32 MiB on Hopper).
    static constexpr uint64_t kCublasWorkspace = 32ull << 20;
    ~DeviceContext();
    DeviceContext(const DeviceContext&) = delete;
    DeviceContext& operator=(const DeviceContext&) = delete;

    int device() const { return device_; }
    const cudaDeviceProp& props() const { return props_; }
    cudaStream_t compute() const { return compute_; }
    cudaStream_t copy() const { return copy_; }
    cublasHandle_t cublas() const { return cublas_; }
    DeviceAllocator& alloc() { return *alloc_; }
    const DeviceAllocator& alloc() const { return *alloc_; }

    template <typename T>
    T* alloc_n(size_t n, const std::string& what) {
        return static_cast<T*>(alloc_->alloc(n * sizeof(T), what));
    }

    /// Pinned host memory mapped into the device address space (written directly by kernels).
    /// Returns the host pointer; *dev receives the device alias. Freed with the context.
    void* host_mapped(size_t bytes, void** dev);

    /// Short description: "NVIDIA H200 (sm_90, 132 SMs), budget 130.2 GiB".
    std::string describe() const;

    /// The whole budget (--vram-budget), bytes.
    uint64_t total_budget() const { return total_budget_; }
    /// GPU memory the CUDA runtime took before the first allocation (context, cuBLAS), bytes;
    /// measured when runtime_overhead_measured().
    uint64_t runtime_overhead() const { return runtime_overhead_; }
    bool runtime_overhead_measured() const { return overhead_measured_; }
    /// GPU memory of the device in use now minus what was in use before this context existed
    /// (the process's footprint when nothing else starts on the GPU), 0 without NVML.
    uint64_t process_used() const;

private:
    int device_;
    uint64_t total_budget_ = 0, runtime_overhead_ = 0, baseline_used_ = 0;
    bool overhead_measured_ = false;
    std::unique_ptr<NvmlMemory> nvml_;
    cudaDeviceProp props_{};
    cudaStream_t compute_ = nullptr, copy_ = nullptr;
    cublasHandle_t cublas_ = nullptr;
    std::unique_ptr<DeviceAllocator> alloc_;
    std::vector<void*> host_mapped_;
};

/// Number of CUDA devices (0 when there is no driver or no device).
int device_count();
/// Host-to-device copy bandwidth of device 0, GB/s (1e9 bytes/s): the best of three copies of
/// `bytes` from pinned host memory after one unmeasured copy; 0 when pinned or device memory is
/// refused. For benchmark records (gpu_h2d_gb_s in runtime/engine.h).
double h2d_gb_s(uint64_t bytes);

}  // namespace nitro::cuda
