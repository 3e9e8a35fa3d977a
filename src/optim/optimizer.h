// Optimizer interface over a flat f32 range of the parameter arena. The range is tiled by segments
// (one per parameter, or the part of it a rank owns) that say whether weight decay applies. State
// (momentum, m, v) is one flat f32 buffer per kind, the same length as the range, so ZeRO can give
// each rank its own range and a checkpoint writes each state buffer contiguously. A step can also
// write the updated weights in the compute dtype (ComputeCopy) in the same pass over memory.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tensor/tensor.h"

namespace zt {

// Where a step also writes the updated weights, converted to the compute dtype (bf16 or f16: round
// to nearest even, f32_to_bf16 / f32_to_f16 bit for bit; f32: a plain copy). Indexed like the
// params; only the segments' elements are written. data == nullptr: no copy.
struct ComputeCopy {
    void* data = nullptr;
    DType dtype = DType::kBF16;
};

struct OptimSegment {
    int64_t offset;  // within the range, elements
    int64_t numel;
    bool decay;      // weight decay applies
};

class Optimizer {
public:
    virtual ~Optimizer() = default;
    // Allocates state for a range of `numel` elements (MemCategory::kOptimizer), zeroed.
    virtual void init_state(MemoryPool& pool, int64_t numel) = 0;
    // One update of params (f32) from grads (f32), both `numel` long, at learning rate lr.
    // `step` counts updates from 1 (bias correction). With copy.data, the updated params are also
    // written there in copy.dtype, the same bits a convert() after the step gives.
    virtual void step(float* params, const float* grads, std::span<const OptimSegment> segments,
                      float lr, int64_t step, const ComputeCopy& copy = {}) = 0;
    // Named state buffers (for checkpoints and memory reports): {"exp_avg", t}, ...
    virtual std::vector<std::pair<std::string, Tensor>> state() = 0;
    virtual std::string name() const = 0;
};

}  // namespace zt
