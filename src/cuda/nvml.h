// GPU memory as the driver sees it (NVML, loaded with dlopen at run time so nothing links against
// the driver's libnvidia-ml.so.1). Used to measure what the CUDA runtime itself takes (context,
// cuBLAS, modules) and the whole process's GPU memory, which --vram-budget bounds.
#pragma once

#include <cstdint>
#include <string>

namespace nitro::cuda {

class NvmlMemory {
public:
    /// Opens NVML for the device with this PCI bus id ("0000:3B:00.0", cudaDeviceGetPCIBusId).
    /// Never throws: available() is false when NVML or the device cannot be found.
    explicit NvmlMemory(const std::string& pci_bus_id);
    ~NvmlMemory();
    NvmlMemory(const NvmlMemory&) = delete;
    NvmlMemory& operator=(const NvmlMemory&) = delete;

    bool available() const { return device_ != nullptr; }
    /// Bytes of memory in use on the whole device (all processes), 0 when unavailable.
    uint64_t device_used() const;

private:
    void* lib_ = nullptr;
    void* device_ = nullptr;
    void* get_memory_info_ = nullptr;
};

}  // namespace nitro::cuda
