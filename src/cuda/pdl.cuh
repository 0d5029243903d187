// Programmatic dependent launch (PDL; CUDA 12+, sm_90): a kernel of the decode chain is scheduled
// while the kernel before it is still running, and waits on the device for it to finish, instead
// of the GPU starting it only after its predecessor has drained (the launch gap: about a
// microsecond a kernel, and a decode step of qwen3-30b-a3b runs 500-700 kernels). Captured into
// the decode CUDA graph as programmatic edges.
//
// The contract: a kernel launched with launch_pdl calls pdl_begin() first, before it reads or
// writes global memory (also before an early return), so everything it touches is ordered after
// its predecessor as with a plain launch. A kernel that lacks pdl_begin must be launched with <<<>>>
// (a plain, full dependency). pdl_begin in a plainly launched kernel does nothing.
#pragma once

#include "cuda/check.h"

#include <cuda_runtime.h>

#include <utility>

namespace nitro::cuda {

/// The top of a kernel launched with launch_pdl: lets the stream's next kernel be scheduled now
/// (its blocks then wait in their own pdl_begin), then waits until the kernels before this one
/// have completed and their writes are visible (griddepcontrol, PTX ISA 7.8).
__device__ __forceinline__ void pdl_begin() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/// True where launch_pdl adds the PDL attribute: a device of compute capability 9.0 or newer,
/// unless NITRO_PDL=0 (the A/B switch of the benchmarks; read once per process) or
/// set_pdl_enabled(0).
bool pdl_enabled();
/// Overrides NITRO_PDL for the launches that follow (a decode graph keeps the launches it was
/// captured with): 1 on (where the device has it), 0 off, -1 back to the default. For tests and
/// benchmarks.
void set_pdl_enabled(int on);

/// kernel<<<grid, block, shmem, s>>>(args...), with programmatic stream serialization allowed where
/// pdl_enabled(). The kernel must begin with pdl_begin(). Aborts on a launch error (NITRO_CUDA_CHECK).
template <typename... P, typename... A>
void launch_pdl(cudaStream_t s, dim3 grid, dim3 block, size_t shmem, void (*kernel)(P...), A&&... args) {
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = shmem;
    cfg.stream = s;
    cfg.attrs = attr;
    cfg.numAttrs = pdl_enabled() ? 1 : 0;
    NITRO_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<A>(args)...));
}

}  // namespace nitro::cuda
