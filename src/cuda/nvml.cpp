#include "cuda/nvml.h"

#include <dlfcn.h>

namespace nitro::cuda {

namespace {

// The few NVML declarations used (nvml.h, stable ABI): nvmlReturn_t is an int, 0 = success.
struct NvmlMemoryInfo {
    unsigned long long total, free, used;
};
using InitFn = int (*)();
using ByPciFn = int (*)(const char*, void**);
using MemFn = int (*)(void*, NvmlMemoryInfo*);
using ShutdownFn = int (*)();

}  // namespace

NvmlMemory::NvmlMemory(const std::string& pci_bus_id) {
    lib_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib_) return;
    auto init = reinterpret_cast<InitFn>(dlsym(lib_, "nvmlInit_v2"));
    auto by_pci = reinterpret_cast<ByPciFn>(dlsym(lib_, "nvmlDeviceGetHandleByPciBusId_v2"));
    get_memory_info_ = dlsym(lib_, "nvmlDeviceGetMemoryInfo");
    if (!init || !by_pci || !get_memory_info_ || init() != 0) return;
    void* dev = nullptr;
    if (by_pci(pci_bus_id.c_str(), &dev) == 0) device_ = dev;
}

NvmlMemory::~NvmlMemory() {
    if (lib_) {
        if (auto shutdown = reinterpret_cast<ShutdownFn>(dlsym(lib_, "nvmlShutdown")); shutdown && device_) shutdown();
        dlclose(lib_);
    }
}

uint64_t NvmlMemory::device_used() const {
    if (!device_) return 0;
    NvmlMemoryInfo info{};
    if (reinterpret_cast<MemFn>(get_memory_info_)(device_, &info) != 0) return 0;
    return info.used;
}

}  // namespace nitro::cuda
