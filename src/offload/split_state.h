// ZeRO-Offload++'s partial offload (zero_optimization.offload_optimizer.ratio r < 1): of a rank's
// update range, the first part stays in memory (MemoryState: its f32 master weights and optimizer
// state in the per-rank budget) and the last r of it lives on the cpu or nvme tier (TieredState),
// Note [Partial offload] in split_state.cpp.
#pragma once

#include <memory>

#include "offload/memory_state.h"
#include "offload/tiered_state.h"
#include "tensor/tensor.h"

namespace zt {

class SplitState final : public UpdateState {
  public:
    // The range's first `in_memory` elements in memory (master weights allocated in pool, the
    // optimizer's in-memory state for them), the rest in `tier` (its range starts at element
    // in_memory of this one; it writes the compute copy from there on).
    SplitState(Optimizer& optimizer, MemoryPool& pool, int64_t in_memory, ComputeCopy compute,
               std::unique_ptr<TieredState> tier);

    const char* tier() const override { return tier_->tier(); }
    int64_t numel() const override { return n_mem_ + tier_->numel(); }
    void read(int which, int64_t lo, int64_t n, float* out) override;
    void write(int which, int64_t lo, int64_t n, const float* in) override;
    const float* view(int) override { return nullptr; }
    void init(const Fill& fill) override;
    void step(const float* grads, std::span<const OptimSegment> segments, float lr,
              int64_t step) override;
    void refresh_compute() override;
    UpdateStateStats stats() const override;

  private:
    // Calls mem(lo, n, at) and tier(lo, n, at) for the parts of [lo, lo + n) each holds, `at`
    // the offset into the caller's buffer, lo relative to the part.
    template <typename M, typename T>
    void split(int64_t lo, int64_t n, M mem, T tier) const;

    int64_t n_mem_;
    Tensor master_;  // the in-memory part's f32 master weights
    std::unique_ptr<MemoryState> mem_;
    std::unique_ptr<TieredState> tier_;
};

// Elements of a range of `numel` the tier holds at offload ratio r in (0, 1]: round(r numel), at
// least one.
int64_t offloaded_numel(int64_t numel, double ratio);

}  // namespace zt
