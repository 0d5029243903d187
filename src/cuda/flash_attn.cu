// Launcher of the flash-attention kernel (flash_attn.h; the kernel and its design: flash_attn.cuh).
#include "cuda/flash_attn.h"

#include "cuda/flash_attn.cuh"

#include <atomic>

namespace nitro::cuda {

namespace {

constexpr int kMaxDevices = 64;

template <int HD>
void launch_flash(cudaStream_t s, const AttnArgs& a) {
    using namespace flash_detail;
    const int64_t G = a.n_head / a.n_head_kv;
    const dim3 grid(static_cast<unsigned>((a.n_q * G + kRows - 1) / kRows), static_cast<unsigned>(a.n_head_kv),
                    static_cast<unsigned>(a.n_split));
    constexpr size_t smem = smem_bytes<HD>();  // 36,864 (HD 64) / 69,632 (HD 128) bytes
    auto kernel = flash_attn_kernel<HD, true>;
    // above 48 KiB a kernel must opt in, once per device (two threads may both set it: the same value)
    static std::atomic<bool> opted_in[kMaxDevices] = {};
    int dev = 0;
    NITRO_CUDA_CHECK(cudaGetDevice(&dev));
    if (dev >= kMaxDevices || !opted_in[dev].load(std::memory_order_acquire)) {
        NITRO_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
        if (dev < kMaxDevices) opted_in[dev].store(true, std::memory_order_release);
    }
    launch_pdl(s, grid, kThreads, smem, kernel, a.q, reinterpret_cast<const __half*>(a.k_cache),
               reinterpret_cast<const __half*>(a.v_cache), a.capacity, static_cast<int>(a.n_q), static_cast<int>(a.n_head),
               static_cast<int>(a.n_head_kv), a.window, a.sinks, a.scale * kLog2e, a.pos0, a.n_split, a.partial, a.out);
    NITRO_CUDA_LAUNCH_CHECK();
}

}  // namespace

bool flash_attention_supported(const AttnArgs& a) {
    return (a.head_dim == 64 || a.head_dim == 128) && a.n_head_kv > 0 && a.n_head % a.n_head_kv == 0 && a.n_q > 0;
}

void flash_attention(cudaStream_t s, const AttnArgs& a) {
    if (!flash_attention_supported(a))
        cfail("CUDA flash attention: head_dim {} with {} / {} heads is not supported", a.head_dim, a.n_head, a.n_head_kv);
    if (a.n_split < 1 || (a.n_split > 1 && (a.n_q != 1 || !a.partial)))
        cfail("CUDA flash attention: {} splits of {} queries (splits need one query and the partial buffer)", a.n_split,
              a.n_q);
    if (a.head_dim == 64) launch_flash<64>(s, a);
    else launch_flash<128>(s, a);
}

}  // namespace nitro::cuda
