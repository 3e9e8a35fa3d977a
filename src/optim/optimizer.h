// Optimizer interface over a flat f32 range of the parameter arena. The range is tiled by segments
// (one per parameter, or the part of it a rank owns) that say whether weight decay applies. State
// (momentum, m, v) is one flat f32 buffer per kind, the same length as the range, so ZeRO can give
// each rank its own range and a checkpoint writes each state buffer contiguously.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tensor/tensor.h"

namespace zt {

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
    // `step` counts updates from 1 (bias correction).
    virtual void step(float* params, const float* grads, std::span<const OptimSegment> segments,
                      float lr, int64_t step) = 0;
    // Named state buffers (for checkpoints and memory reports): {"exp_avg", t}, ...
    virtual std::vector<std::pair<std::string, Tensor>> state() = 0;
    virtual std::string name() const = 0;
};

}  // namespace zt
