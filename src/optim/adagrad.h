// Adagrad, PyTorch's torch.optim.Adagrad (single-tensor, dense) update op for op in f32 (Note
// [Adagrad op order] in adagrad.cpp), one fused pass: AVX-512 where the target has it, threads
// over contiguous shares, the same bits for any thread count and either path, and the compute
// copy (ComputeCopy) written in the same pass. Weight decay is L2, added to the gradient on
// segments marked `decay`. State: sum, flat f32, as long as the range. Leaves out sparse
// gradients and `maximize`.
#pragma once

#include "optim/optimizer.h"

namespace zt {

namespace optim_detail {
enum class KernelPath : uint8_t;  // segment_partition.h
}

struct AdagradOptions {
    double lr_decay = 0.0;  // step t runs at lr / (1 + (t - 1) * lr_decay)
    double weight_decay = 0.0;
    double initial_accumulator_value = 0.0;  // sum before the first step
    double eps = 1e-10;
};

class Adagrad final : public Optimizer {
public:
    explicit Adagrad(const AdagradOptions& options);

    std::vector<std::string> state_names() const override { return {"sum"}; }
    void step_on(float* params, const float* grads, float* const* state, int64_t numel,
                 std::span<const OptimSegment> segments, float lr, int64_t step,
                 const ComputeCopy& copy) const override;
    std::string name() const override { return "Adagrad"; }

    const AdagradOptions& options() const { return options_; }

private:
    AdagradOptions options_;
};

// The fused step over state the caller holds: params, grads, sum (numel,) f32; copy as in
// Optimizer::step_on. Threads over contiguous shares of [0, numel) (the OpenMP thread count; one
// thread below 32Ki elements). `path` picks the kernel (the portable one for tests).
void adagrad_step(const AdagradOptions& options, float* params, const float* grads, float* sum,
                  int64_t numel, std::span<const OptimSegment> segments, float lr, int64_t step,
                  const ComputeCopy& copy, optim_detail::KernelPath path);

}  // namespace zt
