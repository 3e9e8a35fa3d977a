// Optimizer interface over a flat f32 range of the parameter arena. The range is tiled by segments
// (one per parameter, or the part of it a rank owns) that say whether weight decay applies. State
// (momentum, m, v) is one flat f32 buffer per kind, the same length as the range, so ZeRO can give
// each rank its own range and a checkpoint writes each state buffer contiguously. A step can also
// write the updated weights in the compute dtype (ComputeCopy) in the same pass over memory.
//
// An optimizer type says what its state buffers are (state_names) and how one update runs over
// buffers the caller holds (step_on): the offload tiers (offload/) stream master weights and
// state through their own buffers a sub-group at a time. The base class holds the state in memory
// for the ordinary case (init_state, step, state), so both paths run the same update.
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

    // Names of the state buffers, in order ({"exp_avg", "exp_avg_sq"}, ...); each is flat f32, as
    // long as the range, and zero before the first step.
    virtual std::vector<std::string> state_names() const = 0;
    // One update of params (f32) from grads (f32), both `numel` long, at learning rate lr, over
    // state the caller holds: state[i] is state_names()[i]'s buffer, numel long. Segment offsets
    // are relative to params. `step` counts updates from 1 (bias correction). With copy.data, the
    // updated params are also written there in copy.dtype, the same bits a convert() after the
    // step gives. Updates are elementwise: a range cut into pieces updates to the same bits.
    virtual void step_on(float* params, const float* grads, float* const* state, int64_t numel,
                         std::span<const OptimSegment> segments, float lr, int64_t step,
                         const ComputeCopy& copy) const = 0;
    virtual std::string name() const = 0;

    // In-memory state: allocates state_names() buffers for a range of `numel` elements
    // (MemCategory::kOptimizer), zeroed.
    void init_state(MemoryPool& pool, int64_t numel);
    // step_on over the in-memory state (init_state first).
    void step(float* params, const float* grads, std::span<const OptimSegment> segments, float lr,
              int64_t step, const ComputeCopy& copy = {});
    // Named in-memory state buffers (for checkpoints and memory reports): {"exp_avg", t}, ...
    std::vector<std::pair<std::string, Tensor>> state();

private:
    int64_t numel_ = -1;  // -1 until init_state
    std::vector<Tensor> state_;
};

}  // namespace zt
