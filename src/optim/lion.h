// Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms"), as lucidrains'
// lion-pytorch runs it, op for op in f32 (Note [Lion op order] in lion.cpp), one fused pass:
// AVX-512 where the target has it, threads over contiguous shares, the same bits for any thread
// count and either path, and the compute copy (ComputeCopy) written in the same pass. Weight decay
// is decoupled (p *= 1 - lr*wd) on segments marked `decay`. State: exp_avg, flat f32, as long as
// the range. Leaves out the Triton kernel's and `cautious` variants.
#pragma once

#include "optim/optimizer.h"

namespace zt {

namespace optim_detail {
enum class KernelPath : uint8_t;  // segment_partition.h
}

struct LionOptions {
    double beta1 = 0.9;   // interpolation for the update's sign
    double beta2 = 0.99;  // exp_avg's decay
    double weight_decay = 0.0;
};

class Lion final : public Optimizer {
public:
    explicit Lion(const LionOptions& options);

    std::vector<std::string> state_names() const override { return {"exp_avg"}; }
    void step_on(float* params, const float* grads, float* const* state, int64_t numel,
                 std::span<const OptimSegment> segments, float lr, int64_t step,
                 const ComputeCopy& copy) const override;
    std::string name() const override { return "Lion"; }

    const LionOptions& options() const { return options_; }

private:
    LionOptions options_;
};

// The fused step over state the caller holds: params, grads, exp_avg (numel,) f32; copy as in
// Optimizer::step_on. Threads over contiguous shares of [0, numel) (the OpenMP thread count; one
// thread below 32Ki elements). `path` picks the kernel (the portable one for tests).
void lion_step(const LionOptions& options, float* params, const float* grads, float* exp_avg,
               int64_t numel, std::span<const OptimSegment> segments, float lr, int64_t step,
               const ComputeCopy& copy, optim_detail::KernelPath path);

}  // namespace zt
