#include "cuda/context.h"

#include "core/error.h"
#include "cuda/check.h"
#include "cuda/nvml.h"
#include "ops/gpu_limits.h"

#include <cublas_v2.h>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
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

double h2d_gb_s(uint64_t bytes) {
    NITRO_CUDA_CHECK(cudaSetDevice(0));
    void* host = nullptr;
    void* dev = nullptr;
    if (cudaMallocHost(&host, bytes) != cudaSuccess) {
        cudaGetLastError();
        return 0.0;
    }
    if (cudaMalloc(&dev, bytes) != cudaSuccess) {
        cudaGetLastError();
        cudaFreeHost(host);
        return 0.0;
    }
    std::memset(host, 1, bytes);
    cudaEvent_t a, b;
    NITRO_CUDA_CHECK(cudaEventCreate(&a));
    NITRO_CUDA_CHECK(cudaEventCreate(&b));
    double best = 0.0;
    for (int i = 0; i < 4; ++i) {  // the first copy warms the link up and is not counted
        NITRO_CUDA_CHECK(cudaEventRecord(a));
        NITRO_CUDA_CHECK(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice));
        NITRO_CUDA_CHECK(cudaEventRecord(b));
        NITRO_CUDA_CHECK(cudaEventSynchronize(b));
        float ms = 0.f;
        NITRO_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
        if (i > 0 && ms > 0.f) best = std::max(best, static_cast<double>(bytes) / (ms * 1e6));
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    cudaFree(dev);
    cudaFreeHost(host);
    return best;
}

DeviceAllocator::DeviceAllocator(int device, uint64_t budget_bytes) : device_(device), budget_(budget_bytes) {}

DeviceAllocator::~DeviceAllocator() {
    cudaSetDevice(device_);
    for (auto& [p, n] : live_) cudaFree(p);
}

void DeviceAllocator::begin_arena(uint64_t bytes, const std::string& what) {
    NITRO_CHECK(!arena_);
    arena_ = static_cast<uint8_t*>(alloc(bytes, what));
    arena_size_ = bytes;
    arena_off_ = 0;
    arena_what_ = what;
}

void DeviceAllocator::end_arena() { arena_ = nullptr; }

void* DeviceAllocator::alloc(uint64_t bytes, const std::string& what) {
    if (arena_) {
        const uint64_t piece = (std::max<uint64_t>(bytes, 1) + 255) / 256 * 256;
        if (arena_off_ + piece > arena_size_) {
            std::fprintf(stderr, "%s:%d: internal check failed: %s does not fit the %s arena (%llu + %llu > %llu bytes)\n",
                         __FILE__, __LINE__, what.c_str(), arena_what_.c_str(), static_cast<unsigned long long>(arena_off_),
                         static_cast<unsigned long long>(piece), static_cast<unsigned long long>(arena_size_));
            std::abort();
        }
        void* p = arena_ + arena_off_;
        arena_off_ += piece;
        return p;
    }
    const uint64_t rounded = vram_alloc_size(bytes);  // what the device reserves (ops/gpu_limits.h)
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

void DeviceAllocator::set_budget(uint64_t bytes) {
    NITRO_CHECK(bytes >= used_);
    budget_ = bytes;
}

void DeviceAllocator::free(void* p) {
    if (!p) return;
    auto it = std::find_if(live_.begin(), live_.end(), [p](const auto& x) { return x.first == p; });
    if (it == live_.end()) return;  // a piece of an arena
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
    if (n == 0) fail("the GPU engine (--mode gpu/hybrid): no CUDA device is visible (driver missing or no GPU)");
    if (device < 0 || device >= n) fail("--gpu {}: there are {} CUDA device(s) (0..{})", device, n, n - 1);
    // Device memory in use before this process touches the device (NVML needs no CUDA context).
    char pci[32] = {};
    if (cudaDeviceGetPCIBusId(pci, sizeof pci, device) == cudaSuccess) nvml_ = std::make_unique<NvmlMemory>(pci);
    else cudaGetLastError();
    if (nvml_ && nvml_->available()) baseline_used_ = nvml_->device_used();
    NITRO_CUDA_CHECK(cudaSetDevice(device));
    NITRO_CUDA_CHECK(cudaFree(nullptr));  // create the context now
    NITRO_CUDA_CHECK(cudaGetDeviceProperties(&props_, device));
    size_t free_b = 0, total_b = 0;
    NITRO_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    const uint64_t margin = std::max<uint64_t>(512ull << 20, total_b / 33);
    if (budget_gib > 0) {
        total_budget_ = static_cast<uint64_t>(budget_gib * kGiB);
        if (total_budget_ > free_b + (nvml_ && nvml_->available() ? nvml_->device_used() - baseline_used_ : 0))
            fail("--vram-budget {:.2f} GiB is more than the {:.2f} GiB free on GPU {} ({})", budget_gib, free_b / kGiB, device,
                 props_.name);
    } else {
        total_budget_ = free_b > margin ? free_b - margin : 0;
    }
    alloc_ = std::make_unique<DeviceAllocator>(device, total_budget_);
    NITRO_CUDA_CHECK(cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking));
    NITRO_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking));
    if (cublasCreate(&cublas_) != CUBLAS_STATUS_SUCCESS) fail("could not initialise cuBLAS on GPU {}", device);
    cublasSetStream(cublas_, compute_);
    cublasSetMathMode(cublas_, CUBLAS_DEFAULT_MATH);
    // cuBLAS's workspace comes from the budget.
    void* ws = alloc_->alloc(kCublasWorkspace, "cuBLAS workspace");
    if (cublasSetWorkspace(cublas_, ws, kCublasWorkspace) != CUBLAS_STATUS_SUCCESS)
        fail("could not give cuBLAS its workspace on GPU {}", device);
    NITRO_CUDA_CHECK(cudaDeviceSynchronize());
    if (nvml_ && nvml_->available()) {
        const uint64_t now = nvml_->device_used();
        const uint64_t ours = now > baseline_used_ ? now - baseline_used_ : 0;
        // The process's CUDA context is created once; a second context of the same process sees
        // only its own handles. The first (largest) measurement is what the process takes.
        static std::atomic<uint64_t> process_overhead{0};
        uint64_t seen = ours > alloc_->used() ? ours - alloc_->used() : 0;
        uint64_t prev = process_overhead.load();
        while (seen > prev && !process_overhead.compare_exchange_weak(prev, seen)) {
        }
        runtime_overhead_ = std::max(seen, prev);
        overhead_measured_ = true;
    } else {
        runtime_overhead_ = kAssumedRuntimeOverhead;
    }
    if (runtime_overhead_ + alloc_->used() >= total_budget_)
        fail("--vram-budget {:.2f} GiB is below what the CUDA runtime itself takes on GPU {} ({:.0f} MiB{})",
             total_budget_ / kGiB, device, (runtime_overhead_ + alloc_->used()) / kMiB, overhead_measured_ ? "" : ", ASSUMED");
    alloc_->set_budget(total_budget_ - runtime_overhead_);
}

uint64_t DeviceContext::process_used() const {
    if (!nvml_ || !nvml_->available()) return 0;
    const uint64_t now = nvml_->device_used();
    return now > baseline_used_ ? now - baseline_used_ : 0;
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
    return fmt::format("{} (sm_{}{}, {} SMs), GPU {}, budget {:.2f} GiB (CUDA runtime {:.0f} MiB {})", props_.name,
                       props_.major, props_.minor, props_.multiProcessorCount, device_, total_budget_ / kGiB,
                       runtime_overhead_ / kMiB, overhead_measured_ ? "MEASURED" : "ASSUMED");
}

}  // namespace nitro::cuda
