// The "none" tier of offload/update_state.h: the master weights are the parameter arena's (the
// caller's buffer), the optimizer state the optimizer's own in the MemoryPool, updated in place.
#pragma once

#include "offload/update_state.h"

namespace zt {

class MemoryState final : public UpdateState {
  public:
    // master: the range's f32 master weights (numel); compute: the range's compute copy, or
    // data == nullptr when the compute weights are the master (f32 without a separate copy).
    // Allocates the optimizer's state in pool.
    MemoryState(Optimizer& optimizer, MemoryPool& pool, float* master, int64_t numel,
                ComputeCopy compute);

    const char* tier() const override { return "none"; }
    int64_t numel() const override { return numel_; }
    void read(int which, int64_t lo, int64_t n, float* out) override;
    void write(int which, int64_t lo, int64_t n, const float* in) override;
    const float* view(int which) override { return data(which); }
    void init(const Fill& fill) override;
    void step(const float* grads, std::span<const OptimSegment> segments, float lr,
              int64_t step) override;
    void refresh_compute() override;
    UpdateStateStats stats() const override { return stats_; }

  private:
    float* data(int which);

    Optimizer& opt_;
    float* master_;
    int64_t numel_;
    ComputeCopy compute_;
    UpdateStateStats stats_;
};

}  // namespace zt
