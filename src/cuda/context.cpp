#include "cuda/context.h"

#include "core/error.h"
#include "cuda/check.h"

#include <cublas_v2.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace nitro::cuda {

namespace {
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kMiB = 1024.0 * 1024.0;
}  // namespace

void raise_error(const std::string& msg) { throw Error(msg); }

int device_count() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

DeviceAllocator::DeviceAllocator(int device, uint64_t budget_bytes) : device_(device), budget_(budget_bytes) {}

DeviceAllocator::~DeviceAllocator() {
    cudaSetDevice(device_);
    for (auto& [p, n] : live_) cudaFree(p);
}

void* DeviceAllocator::alloc(uint64_t bytes, const std::string& what) {
    const uint64_t rounded = (std::max<uint64_t>(bytes, 1) + 255) / 256 * 256;
    if (used_ + rounded > budget_)
        fail("GPU memory budget exceeded: {} needs {:.1f} MiB but {:.1f} MiB of the {:.2f} GiB budget are in use "
             "({:.1f} MiB left); raise --vram-budget or use a smaller context",
             what, rounded / kMiB, used_ / kMiB, budget_ / kGiB, (budget_ - used_) / kMiB);
    NITRO_CUDA_CHECK(cudaSetDevice(device_));
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, rounded);
    if (e != cudaSuccess) {
        cudaGetLastError();
        size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        fail("the GPU could not allocate {:.1f} MiB for {} ({}; {:.1f} MiB free on the device)", rounded / kMiB, what,
             cudaGetErrorString(e), free_b / kMiB);
    }
    used_ += rounded;
    peak_ = std::max(peak_, used_);
    live_.emplace_back(p, rounded);
    return p;
}

void DeviceAllocator::free(void* p) {
    if (!p) return;
    auto it = std::find_if(live_.begin(), live_.end(), [p](const auto& x) { return x.first == p; });
    NITRO_CHECK(it != live_.end());
    NITRO_CUDA_CHECK(cudaFree(p));
    used_ -= it->second;
    live_.erase(it);
}

StagingRing::StagingRing(cudaStream_t stream, size_t slot_bytes, int slots, bool force_pageable)
    : stream_(stream), slot_bytes_(slot_bytes) {
    if (!force_pageable) {
        pinned_ = true;
        for (int i = 0; i < slots; ++i) {
            void* p = nullptr;
            if (cudaHostAlloc(&p, slot_bytes, cudaHostAllocDefault) != cudaSuccess) {
                cudaGetLastError();
                pinned_ = false;
                break;
            }
            bufs_.push_back(p);
            cudaEvent_t ev;
            NITRO_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
            done_.push_back(ev);
        }
        if (!pinned_) {
            std::fprintf(stderr, "warning: could not pin %.0f MiB of host memory for uploads; using pageable copies\n",
                         slot_bytes * slots / kMiB);
            for (void* p : bufs_) cudaFreeHost(p);
            for (auto ev : done_) cudaEventDestroy(ev);
            bufs_.clear();
            done_.clear();
        }
    }
}

StagingRing::~StagingRing() {
    finish();
    for (void* p : bufs_) cudaFreeHost(p);
    for (auto ev : done_) cudaEventDestroy(ev);
}

void StagingRing::upload(void* dst, const void* src, size_t bytes) {
    if (!pinned_) {
        NITRO_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
        NITRO_CUDA_CHECK(cudaStreamSynchronize(stream_));
        return;
    }
    const auto* s = static_cast<const uint8_t*>(src);
    auto* d = static_cast<uint8_t*>(dst);
    for (size_t off = 0; off < bytes; off += slot_bytes_) {
        const size_t n = std::min(slot_bytes_, bytes - off);
        const int i = next_;
        next_ = (next_ + 1) % static_cast<int>(bufs_.size());
        NITRO_CUDA_CHECK(cudaEventSynchronize(done_[i]));  // the slot's previous copy has landed
        std::memcpy(bufs_[i], s + off, n);
        NITRO_CUDA_CHECK(cudaMemcpyAsync(d + off, bufs_[i], n, cudaMemcpyHostToDevice, stream_));
        NITRO_CUDA_CHECK(cudaEventRecord(done_[i], stream_));
    }
}

void StagingRing::finish() { NITRO_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

DeviceContext::DeviceContext(int device, double budget_gib) : device_(device) {
    const int n = device_count();
    if (n == 0) fail("--mode gpu: no CUDA device is visible (driver missing or no GPU)");
    if (device < 0 || device >= n) fail("--gpu {}: there are {} CUDA device(s) (0..{})", device, n, n - 1);
    NITRO_CUDA_CHECK(cudaSetDevice(device));
    NITRO_CUDA_CHECK(cudaGetDeviceProperties(&props_, device));
    size_t free_b = 0, total_b = 0;
    NITRO_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    const uint64_t margin = std::max<uint64_t>(512ull << 20, total_b / 33);
    uint64_t budget;
    if (budget_gib > 0) {
        budget = static_cast<uint64_t>(budget_gib * kGiB);
        if (budget > free_b)
            fail("--vram-budget {:.2f} GiB is more than the {:.2f} GiB free on GPU {} ({})", budget_gib, free_b / kGiB, device,
                 props_.name);
    } else {
        budget = free_b > margin ? free_b - margin : 0;
    }
    alloc_ = std::make_unique<DeviceAllocator>(device, budget);
    NITRO_CUDA_CHECK(cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking));
    NITRO_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking));
    if (cublasCreate(&cublas_) != CUBLAS_STATUS_SUCCESS) fail("could not initialise cuBLAS on GPU {}", device);
    cublasSetStream(cublas_, compute_);
    cublasSetMathMode(cublas_, CUBLAS_DEFAULT_MATH);
}

DeviceContext::~DeviceContext() {
    cudaSetDevice(device_);
    cudaDeviceSynchronize();
    if (cublas_) cublasDestroy(cublas_);
    for (void* p : host_mapped_) cudaFreeHost(p);
    alloc_.reset();
    if (compute_) cudaStreamDestroy(compute_);
    if (copy_) cudaStreamDestroy(copy_);
}

void* DeviceContext::host_mapped(size_t bytes, void** dev) {
    void* h = nullptr;
    NITRO_CUDA_CHECK(cudaHostAlloc(&h, bytes, cudaHostAllocMapped));
    std::memset(h, 0, bytes);
    NITRO_CUDA_CHECK(cudaHostGetDevicePointer(dev, h, 0));
    host_mapped_.push_back(h);
    return h;
}

std::string DeviceContext::describe() const {
    return fmt::format("{} (sm_{}{}, {} SMs), GPU {}, budget {:.2f} GiB", props_.name, props_.major, props_.minor,
                       props_.multiProcessorCount, device_, alloc_->budget() / kGiB);
}

}  // namespace nitro::cuda
