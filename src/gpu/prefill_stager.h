// Prompt processing in hybrid placement (issue 14, docs/hybrid.md "Prompts"): a bounded pipeline
// that brings non-resident experts from the mmap'd file to the GPU for the GEMMs of a prompt chunk.
//
//   fill (CPU)  -> pinned buffer b = i % n_buffers   (a small thread team memcpys the expert's
//                                                     gate, up and down bytes from the file)
//   copy (DMA)  -> scratch slot p = i % n_slots      (its own stream, after slot p's previous
//                                                     GEMMs have run: an event per slot)
//   GEMMs (GPU) on the compute stream, after the copy (an event per staged expert)
//
// so the CPU fills expert i + 1 while the DMA copies expert i and the GPU multiplies expert i - 1.
// Never the whole model is pinned (pinning 15 GB fails on real machines, ollama #11772): n_buffers
// buffers of one expert each; if pinning fails the stager falls back to pageable buffers with a
// warning (copies then run at pageable speed, results are the same).
//
// In place (--prefill-pin GiB, off by default): a bounded part of the mapped file's expert pages
// can be registered with CUDA (pin_in_place); an expert whose parts all lie in registered pages
// is copied by DMA straight from the file, with no fill. The fill is a DRAM read plus a DRAM write
// and the DMA then reads the buffer again: about three bytes of DRAM traffic per staged byte, so
// with the fill and the copies sharing the DRAM the ring stages at about a third of the DRAM
// bandwidth (MEASURED 33 GB/s on the lent H200 host against a 107 GB/s read probe and 54 GB/s
// PCIe, docs/hybrid.md); an expert copied in place costs one byte per byte.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace nitro::cpu {
class ThreadPool;
}

namespace nitro::cuda {

class DeviceAllocator;

class PrefillStager {
public:
    /// One part of an expert in the file (gate, up or down matrix: contiguous bytes).
    struct Part {
        const uint8_t* src = nullptr;
        size_t bytes = 0;
    };
    /// Where each part lands in a slot: offsets 256-byte aligned, in order (runtime/placement.h
    /// Plan::stage_slot_bytes counts them that way).
    static size_t part_offset(std::span<const Part> parts, size_t i);

    /// n_slots scratch slots of slot_bytes on the device (from `alloc`, counted by the plan),
    /// n_buffers pinned host buffers of slot_bytes (fewer, then pageable, with a warning on stderr
    /// when pinning fails; max_pinned >= 0 caps them: fault injection for tests), a fill team of
    /// n_threads (>= 1, the caller included; a stage() may use fewer of them).
    PrefillStager(DeviceAllocator& alloc, size_t slot_bytes, int n_slots, int n_buffers, int n_threads, int max_pinned = -1);
    ~PrefillStager();
    PrefillStager(const PrefillStager&) = delete;
    PrefillStager& operator=(const PrefillStager&) = delete;

    /// Stages one expert: fills a buffer with `parts` (and, when `also_to` is given, copies the
    /// parts back to back there too: an admitted expert's copy-on-compute buffer), copies it into
    /// a free scratch slot and makes `compute` wait for that copy. Returns the slot's device
    /// address (part i at part_offset(parts, i)). Call release() after the GEMMs that read it have
    /// been enqueued on `compute`. fill_threads > 0: at most that many of the team fill (the rest
    /// of the cores run the CPU's share of the layer); 0 = the whole team. Throws nitro::Error if
    /// the parts do not fit a slot.
    const uint8_t* stage(std::span<const Part> parts, uint8_t* also_to, cudaStream_t compute, int fill_threads = 0);
    /// The slot of the last stage() is free once the work enqueued on `compute` so far has run.
    void release(cudaStream_t compute);

    /// Registers the whole pages inside [begin, begin + bytes) of the mapped file with CUDA
    /// (read-only, page-locked in place), so that stage() copies an expert whose parts lie in
    /// registered pages straight from the file. Returns the bytes registered (0 when the range
    /// holds no whole page, or when the driver refuses: a warning on stderr the first time, and no
    /// further registration is tried). Ranges must not overlap earlier ones. Unregistered in the
    /// destructor.
    size_t pin_in_place(const uint8_t* begin, size_t bytes);
    /// True when every part lies in pages registered by pin_in_place.
    bool in_place(std::span<const Part> parts) const;
    /// Bytes registered in place.
    size_t pinned_in_place_bytes() const { return pinned_in_place_; }
    /// True once the driver refused a registration (no further one is tried).
    bool pin_refused() const { return pin_refused_; }

    /// Time the compute stream waited for copies, ms, summed over the experts staged since the
    /// last call (they must have completed: call after synchronising `compute`). Resets.
    double take_gpu_wait_ms();

    struct Stats {
        uint64_t experts = 0;      ///< experts staged
        uint64_t bytes = 0;        ///< bytes copied host -> device
        double fill_ms = 0;        ///< CPU time filling buffers (wall, the fill team)
        double buffer_wait_ms = 0; ///< CPU time waiting for a buffer's previous copy
        uint64_t in_place_experts = 0;  ///< of the experts, those copied straight from registered file pages
        uint64_t in_place_bytes = 0;    ///< their bytes
    };
    const Stats& stats() const { return stats_; }
    void reset_stats() { stats_ = Stats{}; }
    bool pinned() const { return pinned_; }
    int n_slots() const { return static_cast<int>(slots_.size()); }
    size_t slot_bytes() const { return slot_bytes_; }

    /// MEASURED host -> device rate of the staging path, GB/s: `bytes` (at most a slot) copied
    /// from one of the buffers into a slot, best of 3 after a warm-up.
    double measure_copy_gb_s(size_t bytes);
    /// MEASURED fill rate, GB/s: each sample (the parts of one expert, as stage() fills them;
    /// distinct experts of the mapped file, so they are cold in the caches) copied once into a
    /// buffer by `fill_threads` of the team (0 = all); total bytes over total time.
    double measure_fill_gb_s(std::span<const std::vector<Part>> samples, int fill_threads = 0);

private:
    void fill(uint8_t* dst, std::span<const Part> parts, uint8_t* also_to, int threads);

    size_t slot_bytes_;
    bool pinned_ = true;
    cudaStream_t stream_ = nullptr;
    std::vector<uint8_t*> slots_;            ///< device
    std::vector<uint8_t*> bufs_;             ///< host (pinned, or pageable after a failure)
    std::vector<std::unique_ptr<uint8_t[]>> pageable_;
    std::vector<cudaEvent_t> buf_free_;      ///< recorded on stream_ after the copy that read the buffer
    std::vector<cudaEvent_t> slot_free_;     ///< recorded on compute after the GEMMs that read the slot
    std::vector<bool> buf_used_, slot_used_;
    // Per staged expert (since take_gpu_wait_ms): compute reached the wait / the copy was done.
    std::vector<cudaEvent_t> ev_reach_, ev_ready_;
    size_t n_timed_ = 0;
    uint64_t next_ = 0;
    int last_slot_ = -1;
    std::unique_ptr<cpu::ThreadPool> team_;
    Stats stats_;
    /// Registered page ranges of the file, [begin, end), sorted by begin.
    std::vector<std::pair<uintptr_t, uintptr_t>> in_place_;
    size_t pinned_in_place_ = 0;
    bool pin_refused_ = false;
};

}  // namespace nitro::cuda
