// DynamicRows: where a dynamic table (dynamic_table.h) keeps its rows' values and optimizer state,
// addressed by slot (the table keeps ids, counters and the slots dense in [0, rows)). Two kinds:
// in memory (two tensors from the pool that double when full), and on a tier (embedding.tier,
// docs/embedding-tier.md): a RowTier over a store that grows (host memory outside the budget or
// swap files), behind a cache of hot rows in the budget (Note [Growing tier] in row_tier_grow.cpp).
// The cache holds exact f32 copies, so a tiered table trains bit for bit like one in memory.
// A training lookup fetches its rows (pinned until the step's end), evaluation copies them
// without touching the cache. Not thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "embedding/row_tier.h"
#include "optim/sparse_rows.h"
#include "tensor/tensor.h"

namespace zt {

class SegmentedStore;

// embedding.tier for dynamic tables (docs/embedding-tier.md).
struct DynamicTierOptions {
    std::string device = "none";  // "none": in memory; "cpu": host memory; "nvme": swap files
    std::string nvme_path;        // device "nvme": the swap files' directory
    std::string file_name;        // the swap files: zerotrain-swap-<pid>-<file_name>-<segment>.bin
    double cache_ratio = 0;       // the cache: this fraction of the table's slots,
    int64_t cache_rows = 0;       // or this many rows
    RowCachePolicy policy = RowCachePolicy::kLru;
    int queue_depth = 1024;
    bool on() const { return device != "none"; }
};

class DynamicRows {
  public:
    virtual ~DynamicRows() = default;

    // Slots [0, slots) exist (more than now); the first `live` keep their rows.
    virtual void grow(int64_t slots, int64_t live) = 0;
    // Bytes in the budget (rows or cache, and the cache's bookkeeping).
    virtual int64_t bytes() const = 0;
    // A new row at `slot` (an admission): weights w, every state value `state_value`.
    virtual void init(int64_t slot, const float* w, float state_value) = 0;
    // A training lookup: handles[i] names slots[i]'s row for row() until end_step() (repeats
    // allowed). Evaluation: read().
    virtual void fetch(std::span<const int64_t> slots, int64_t* handles) = 0;
    virtual const float* row(int64_t handle) const = 0;
    // Copies of rows (weights: n x dim; state: n x state columns, or null).
    virtual void read(std::span<const int64_t> slots, float* w, float* state) = 0;
    virtual void read_range(int64_t s0, int64_t n, float* w, float* state) = 0;
    // Sets rows [s0, s0 + n) (weights and state).
    virtual void write_range(int64_t s0, int64_t n, const float* w, const float* state) = 0;
    // The step's sparse update of `slots` (fetched in this step, distinct).
    virtual void update(const SparseRowOptimizer& opt, std::span<const int64_t> slots,
                        const float* grads, float lr, int64_t update) = 0;
    // The same for rows fetched in an earlier step (a stale update): a tier fetches them again
    // (not counted as lookups) and keeps them pinned until end_step().
    virtual void update_late(const SparseRowOptimizer& opt, std::span<const int64_t> slots,
                             const float* grads, float lr, int64_t update) {
        this->update(opt, slots, grads, lr, update);
    }
    // The step is over (its rows unpinned).
    virtual void end_step() = 0;
    // Evictions (Note [Eviction]): the rows of `dropped` are gone; each (from, to) moves a row.
    virtual void compact(std::span<const int64_t> dropped,
                         std::span<const std::pair<int64_t, int64_t>> moves) = 0;
    // Every row is gone (before a restore).
    virtual void clear() = 0;
    // Reads ahead the rows of slots for a later fetch (tiers; others: nothing).
    virtual void prefetch(std::span<const int64_t> /*slots*/) {}
    // The tier, or null in memory.
    virtual RowTier* tier() { return nullptr; }
    virtual const RowTier* tier() const { return nullptr; }
};

// The rows in memory: tensors (capacity, dim) and (capacity, state) from the pool.
class MemoryRows final : public DynamicRows {
  public:
    MemoryRows(MemoryPool& pool, std::string name, int64_t dim, int64_t state_cols);
    void grow(int64_t slots, int64_t live) override;
    int64_t bytes() const override { return capacity_ * (dim_ + sc_) * 4; }
    void init(int64_t slot, const float* w, float state_value) override;
    void fetch(std::span<const int64_t> slots, int64_t* handles) override;
    const float* row(int64_t handle) const override { return w_.data<float>() + handle * dim_; }
    void read(std::span<const int64_t> slots, float* w, float* state) override;
    void read_range(int64_t s0, int64_t n, float* w, float* state) override;
    void write_range(int64_t s0, int64_t n, const float* w, const float* state) override;
    void update(const SparseRowOptimizer& opt, std::span<const int64_t> slots, const float* grads,
                float lr, int64_t update) override;
    void end_step() override {}
    void compact(std::span<const int64_t> dropped,
                 std::span<const std::pair<int64_t, int64_t>> moves) override;
    void clear() override {}
    SparseRowStorage storage();
    float* state() { return sc_ > 0 ? s_.data<float>() : nullptr; }

  private:
    MemoryPool& pool_;
    std::string name_;
    int64_t dim_, sc_, capacity_ = 0;
    Tensor w_, s_;
};

// The rows on a tier: a RowTier over a SegmentedStore (offload/segmented_store.h) that grows with
// the slots. New rows wait as records until their fetch writes them into the cache (they are
// never read from the store).
class TieredRows final : public DynamicRows {
  public:
    TieredRows(MemoryPool& pool, std::string name, int64_t dim, int64_t state_cols, int64_t slots,
               const DynamicTierOptions& options);
    ~TieredRows() override;
    void grow(int64_t slots, int64_t live) override;
    int64_t bytes() const override;
    void init(int64_t slot, const float* w, float state_value) override;
    void fetch(std::span<const int64_t> slots, int64_t* handles) override;
    const float* row(int64_t handle) const override { return tier_->slot_weights(handle); }
    void read(std::span<const int64_t> slots, float* w, float* state) override;
    void read_range(int64_t s0, int64_t n, float* w, float* state) override;
    void write_range(int64_t s0, int64_t n, const float* w, const float* state) override;
    void update(const SparseRowOptimizer& opt, std::span<const int64_t> slots, const float* grads,
                float lr, int64_t update) override;
    void update_late(const SparseRowOptimizer& opt, std::span<const int64_t> slots,
                     const float* grads, float lr, int64_t update) override;
    void end_step() override;
    void compact(std::span<const int64_t> dropped,
                 std::span<const std::pair<int64_t, int64_t>> moves) override;
    void clear() override;
    void prefetch(std::span<const int64_t> slots) override;
    RowTier* tier() override { return tier_.get(); }
    const RowTier* tier() const override { return tier_.get(); }

  private:
    // The optimizer's step on the rows at handles_ (cache slots), marked dirty.
    void step_handles(const SparseRowOptimizer& opt, const float* grads, float lr,
                      int64_t update);
    int64_t cache_for(int64_t slots) const;  // the cache's slots for a table of `slots`
    void flush_fresh();                      // new rows not fetched yet: onto the tier

    int64_t dim_, sc_;
    DynamicTierOptions options_;
    SegmentedStore* store_ = nullptr;  // owned by tier_
    std::unique_ptr<RowTier> tier_;
    // New rows [fresh_first_, fresh_first_ + n): their records (weights, state), in slot order.
    int64_t fresh_first_ = 0;
    std::vector<float> fresh_;
    std::vector<uint8_t> flags_;
    std::vector<int64_t> handles_;
};

std::unique_ptr<DynamicRows> make_dynamic_rows(MemoryPool& pool, const std::string& name,
                                               int64_t dim, int64_t state_cols, int64_t slots,
                                               const DynamicTierOptions& tier);

}  // namespace zt
