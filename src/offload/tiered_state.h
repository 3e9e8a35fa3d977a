// The "cpu" and "nvme" tiers of offload/update_state.h: master weights and optimizer state in a
// Store, by sub-group (Note [Sub-group records] in tiered_state.cpp), the step streaming them
// through `buffer_count` staging buffers: sub-group k is updated while k+1.. are read and k-1..
// written, so the disk and the update overlap. A store that is addressable memory (the cpu tier)
// is updated in place and only the gradients and compute weights pass through staging buffers.
#pragma once

#include <memory>
#include <vector>

#include "offload/param_tier.h"
#include "offload/store.h"
#include "offload/update_state.h"

namespace zt {

struct TieredStateOptions {
    int64_t sub_group_size = 1000000000;  // elements per sub-group (DeepSpeed's default)
    int buffer_count = 4;                 // staging buffers (offload_optimizer.buffer_count)
    // The gradients step() reads are in host memory already (ZeRO stages 2-3 keep them there
    // under offload, Note [Gradients on the host] in runtime/engine.cpp): read in place, with
    // no staging copy.
    bool grads_on_host = false;
};

class TieredState final : public UpdateState {
  public:
    // The bytes a store for `numel` elements of `optimizer`'s state needs (make the store with
    // this capacity), and the staging bytes the state will allocate.
    static uint64_t store_bytes(const Optimizer& optimizer, int64_t numel,
                                const TieredStateOptions& options);
    static uint64_t staging_bytes(const Optimizer& optimizer, int64_t numel, DType compute,
                                  const TieredStateOptions& options);
    // The same from the state count, for a tier that is addressable memory (`mapped`: records
    // updated in place, no record buffers) or not: the estimator's figure (planner/).
    static uint64_t staging_bytes(int states, int64_t numel, DType compute,
                                  const TieredStateOptions& options, bool mapped);

    // compute: where the range's compute weights go (always a separate buffer: the arena holds
    // no master under offload), or, with `params` (offload_param), only their dtype: they go to
    // that tier. The store must hold store_bytes().
    TieredState(const Optimizer& optimizer, int64_t numel, ComputeCopy compute,
                std::unique_ptr<Store> store, TieredStateOptions options,
                ParamTier* params = nullptr);
    ~TieredState() override;
    TieredState(const TieredState&) = delete;
    TieredState& operator=(const TieredState&) = delete;

    const char* tier() const override { return store_->tier(); }
    int64_t numel() const override { return numel_; }
    void read(int which, int64_t lo, int64_t n, float* out) override;
    void write(int which, int64_t lo, int64_t n, const float* in) override;
    const float* view(int) override { return nullptr; }
    void init(const Fill& fill) override;
    void step(const float* grads, std::span<const OptimSegment> segments, float lr,
              int64_t step) override;
    void refresh_compute() override;
    UpdateStateStats stats() const override;

  private:
    struct Staging {
        float* record = nullptr;    // (tensors x group) f32, unused where the store is mapped
        float* grads = nullptr;     // group f32
        void* copy = nullptr;       // group in the compute dtype
        Store::Ticket pending = 0;  // a write from `record` not yet waited for
    };
    int64_t group_lo(int64_t k) const { return k * group_; }
    int64_t group_n(int64_t k) const { return std::min(group_, numel_ - k * group_); }
    uint64_t record_offset(int64_t k) const { return static_cast<uint64_t>(k) * record_bytes_; }
    // The record of sub-group k: in the store where mapped, else read into s.record (blocking).
    float* load(int64_t k, Staging& s);
    void store_back(int64_t k, Staging& s);  // after load(): writes s.record back (blocking)
    void wait(Store::Ticket t);
    void copy_out(int64_t k, const Staging& s);  // s.copy -> compute weights of sub-group k

    int64_t numel_;
    int tensors_;    // 1 + state count
    int64_t group_;  // elements per sub-group, a multiple of kStoreAlign / 4
    int64_t groups_;
    uint64_t record_bytes_;
    ComputeCopy compute_;
    std::unique_ptr<Store> store_;
    ParamTier* params_;
    bool mapped_;
    bool grads_on_host_;
    std::vector<Staging> staging_;
    std::vector<void*> allocations_;
    UpdateStateStats stats_;
};

}  // namespace zt
