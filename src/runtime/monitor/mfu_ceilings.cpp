#include "runtime/monitor/mfu_ceilings.h"

#include <algorithm>

#include "tensor/gemm_machine.h"
#include "tensor/peak.h"
#include "tensor/threads.h"

namespace zt {

namespace {
constexpr double kPeakSecondsPerKernel = 0.02;  // register loops reach their rate in microseconds
}  // namespace

MonitorConfig measured_ceilings(const TrainConfig& cfg, int ranks) {
    MonitorConfig m = cfg.monitor;
    const bool bf16 = cfg.precision == "bf16";  // fp16 multiplies as f32 (Note [Widened GEMM])
    if (m.gemm_ceiling_flops <= 0)
        m.gemm_ceiling_flops =
            ranks * current_gemm_choice().ceiling_flops(bf16 ? DType::kBF16 : DType::kF32);
    if (m.peak_flops <= 0) {
        const PeakRates p = measure_compute_peak(num_threads(), kPeakSecondsPerKernel);
        m.peak_flops = ranks * (bf16 ? std::max(p.bf16_flops(), p.f32_fma_flops) : p.f32_fma_flops);
    }
    return m;
}

}  // namespace zt
