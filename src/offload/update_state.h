// Where one rank's update range lives: its f32 master weights and optimizer state, and the
// optimizer step over them. The engine and the checkpointer see only this interface; the tier is
// a type chosen once where the engine is built (zero_optimization.offload_optimizer.device):
//   MemoryState  "none": master weights in the parameter arena, state in the MemoryPool (the
//                per-rank budget), updated in place (offload/memory_state.h)
//   TieredState  "cpu" or "nvme": both in a Store outside the budget, streamed a sub-group at a
//                time through staging buffers (offload/tiered_state.h)
// Both run the optimizer's own step_on over the same elements with the same scalars, so every tier
// gives the same bits. Both write the compute copy of the range (the weights forward uses) in the
// pass that updates the master, so no second pass converts it.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "optim/optimizer.h"

namespace zt {

// What a tier moved and waited for, summed since the start (metrics, the benchmark).
struct UpdateStateStats {
    uint64_t bytes_read = 0;     // from the tier into staging buffers
    uint64_t bytes_written = 0;  // from staging buffers to the tier
    uint64_t d2h_bytes = 0;      // gradients copied out of the device arena
    uint64_t h2d_bytes = 0;      // compute weights copied into the device arena
    double step_s = 0;           // seconds in step()
    double compute_s = 0;        // of which in the optimizer's update
    double io_wait_s = 0;        // of which blocked on the tier's I/O (issuing or waiting)
    int64_t tier_bytes = 0;      // bytes the tier holds (swap file or host memory)
    int64_t staging_bytes = 0;   // bytes of staging buffers
};

// The segments of [lo, lo + n), shifted to start at lo.
std::vector<OptimSegment> slice_segments(std::span<const OptimSegment> segs, int64_t lo,
                                         int64_t n);

class UpdateState {
  public:
    // The tensors read() and write() address: 0 is "master", then the optimizer's state_names().
    using Fill = std::function<void(int64_t lo, int64_t n, float* out)>;

    virtual ~UpdateState() = default;
    virtual const char* tier() const = 0;  // "none", "cpu" or "nvme"
    virtual int64_t numel() const = 0;     // elements of the update range
    std::vector<std::string> names() const;
    // Elements [lo, lo + n) of tensor `which` (range-relative), copied out or in. Not during
    // step().
    virtual void read(int which, int64_t lo, int64_t n, float* out) = 0;
    virtual void write(int which, int64_t lo, int64_t n, const float* in) = 0;
    // The tensor's data in memory, or nullptr where the tier holds it elsewhere.
    virtual const float* view(int which) = 0;
    // Sets the master weights from fill(lo, n, out) (range-relative) and the state to zero.
    virtual void init(const Fill& fill) = 0;
    // One optimizer update from the range's f32 gradients; also writes the compute copy.
    virtual void step(const float* grads, std::span<const OptimSegment> segments, float lr,
                      int64_t step) = 0;
    // Writes the compute copy from the master weights (after write() of the master).
    virtual void refresh_compute() = 0;
    virtual UpdateStateStats stats() const = 0;

  protected:
    explicit UpdateState(const Optimizer& optimizer) : optimizer_(optimizer) {}
    const Optimizer& optimizer_;
};

}  // namespace zt
