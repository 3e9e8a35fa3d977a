// The hardware's physical limits on the running machine, measured (`zerotrain bench peak`,
// docs/peak.md): register-only fp32 FMA and bf16 dot-product / AMX tile loops, and a streaming
// read of a buffer far larger than the caches. MFU is reported against these beside the GEMM
// ceiling. Rates are what the loops reach, not a datasheet's: nothing here assumes the CPU.
#pragma once

#include <cstddef>
#include <string>

namespace zt {

struct PeakRates {
    int threads = 0;
    double f32_fma_flops = 0;         // register-only fp32 FMA loop, FLOP/s over all threads
    double bf16_dot_flops = 0;        // AVX512_BF16 vdpbf16ps loop (0 when the CPU lacks it)
    double amx_bf16_flops = 0;        // AMX tdpbf16ps tile loop (0 when absent or the OS refuses AMX)
    double mem_read_bytes_per_s = 0;  // streaming read of a buffer far larger than the caches
    double bf16_flops() const;        // the best bf16 rate of the above (max of dot and amx)
    std::string isa;                  // e.g. "avx512f+avx512_bf16+amx_bf16" - what was used
};

// Measures at `threads` OpenMP threads, spending about `seconds` per kernel (best of a few
// repeats). Each thread runs its own loop; a rate is the work of all threads over the slowest
// thread's time.
PeakRates measure_peak(int threads, double seconds);
// Only the compute kernels (no memory kernel), for a fast start-up measurement.
PeakRates measure_compute_peak(int threads, double seconds);

// The memory kernel's buffer: 4 x the L3 cache, at least 1 GiB, at most a quarter of physical
// memory. Pure, for tests; peak_mem_buffer_bytes() applies it to this machine.
size_t peak_mem_buffer_bytes(size_t l3_bytes, size_t phys_bytes);
size_t peak_mem_buffer_bytes();
// A sysfs cache size ("491520K", "32M", "1024"), in bytes; 0 when it does not parse.
size_t parse_cache_size(const std::string& text);

}  // namespace zt
