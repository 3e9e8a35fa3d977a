// DynamicTables: a model's dynamic embedding tables (dynamic_table.h) as sparse parameters
// (nn/sparse_params.h), sharded row-wise over the data-parallel ranks by a hash of the id
// (Note [Dynamic exchange] in dynamic_exchange.cpp: one rank owns each id's row, state and
// counters; lookups route distinct ids to their owners with all-to-alls and pool the rows with
// the ordinary embedding_bag op; an unadmitted id reads zeros or the table's shared default row,
// replicated on every rank). Backward adds each distinct row's gradient into its owner's step
// accumulator in the one-process micro-batch order, so on one rank a dynamic table that admits
// every id and evicts nothing takes a static table's update bits. The step applies the fused
// sparse optimizer to the rows used (ascending ids) and then ends the tables' step (evictions;
// evict.max_rows is per rank: ceil(R / N)). Checkpoints carry one block per table and rank with
// its ids and counters in the block's aux words, whole or (incremental checkpoints) only what
// changed since the last one; on another rank count each rank keeps the ids it owns from every
// block. With embedding.tier each table's rows live on a tier behind a cache of hot rows
// (dynamic_rows.h), bit for bit like rows in memory; the step's figures go to metrics as
// embedding.tier. With embedding.staleness s a step's update lands s steps later, keyed by id
// (Note [Stale dynamic updates] in dynamic_stale.cpp). Leaves out: bf16 rows.
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "autograd/ops.h"
#include "embedding/dynamic_table.h"
#include "nn/model.h"
#include "nn/sparse_params.h"
#include "optim/sparse_rows.h"

namespace zt {

struct DynamicTablesOptions {
    SparseOptimOptions optimizer;
    double lr = 0;                      // the tables' own rate; 0: the dense optimizer's
    DType compute_dtype = DType::kF32;  // dtype of the rows handed to pooling
    // embedding.tier: where the rows live (device, path, policy, queue depth; cache_ratio of each
    // table's slots), or cache_bytes per rank: the same number of cache rows for every table.
    DynamicTierOptions tier;
    int64_t tier_cache_bytes = 0;
    // embedding.staleness: 0, every step updates the rows it used (synchronous); s > 0, a step's
    // update lands at the end of the s-th step after it (Note [Stale dynamic updates]).
    int staleness = 0;
};

class DynamicTables : public SparseParams {
  public:
    // tables: one per dynamic table (its name, dim, admission, eviction, init and seed);
    // features: the batch feature (ClickBatch::ids index) each table reads; comm: the
    // data-parallel group (null: one rank).
    DynamicTables(MemoryPool& pool, std::vector<DynamicTableOptions> tables,
                  std::vector<int> features, Communicator* comm,
                  const DynamicTablesOptions& options);
    ~DynamicTables() override;

    size_t size() const { return tables_.size(); }
    DynamicTable& table(size_t i) { return *tables_[i]; }

    // Collective: the pooled embeddings (B, dim) of every dynamic table for this micro-batch, in
    // table order. A recording tape is training: ids are sighted (and may be admitted);
    // otherwise they are only looked up.
    std::vector<Var> lookup(Tape& tape, const ClickBatch& batch,
                            std::span<const ops::BagPooling> pooling);
    // embedding.tier, collective: every rank's next micro-batch's ids go to their owners, whose
    // tiers start reading those rows (Note [Row prefetch]). Without a tier: nothing.
    void prefetch(const ClickBatch& next);
    bool tiered() const { return tiered_; }

    void finish_grads() override;
    double grad_sq_sum() const override;
    void scale_grads(float coef) override;
    void step(double lr, double base_lr, int64_t update) override;
    void zero_grads() override;
    void apply_held(double lr, double base_lr, int64_t update) override;

    // Tensor i is table i's live rows over all ranks, ascending by id: (rows, dim); shape() gives
    // the rows as of the last step or gather().
    std::vector<std::string> names() const override;
    Shape shape(size_t i) const override;
    int64_t state_cols(size_t i) const override;
    int64_t numel() const override;
    std::vector<float> gather(size_t i, int root) override;
    bool keyed(size_t) const override { return true; }
    // The ids of the last gather(i)'s rows (ascending); collective: the evicted ids.
    std::vector<uint64_t> row_ids(size_t i) const override;
    std::vector<uint64_t> take_deleted(size_t i) override;
    std::vector<float> unadmitted_row(size_t i) const override;
    void load(size_t i, const float* whole) override;
    std::vector<SparseBlock> blocks(size_t i) const override;
    void load_block(size_t i, const SparseBlock& b) override;
    bool overlaps(size_t i, const SparseBlock& b) const override;
    std::string optimizer_name() const override {
        return sparse_optim_name(options_.optimizer.kind);
    }
    bool incremental(size_t) const override { return true; }
    void track_changes(bool on) override;
    std::vector<SparseBlock> delta_blocks(size_t i) const override;
    void apply_delta(size_t i, SparseBlock& base, const SparseBlock& delta) const override;
    bool is_delta(size_t, const SparseBlock& b) const override {
        return DynamicTable::is_delta(b.aux);
    }
    void saved() override;

    std::vector<std::string> describe() const override;
    nlohmann::json plan_json() const override;
    nlohmann::json step_counters() const override;
    void on_backward_exchange(std::function<void()> done) override {
        exchange_done_ = std::move(done);
    }
    void on_tier_writeback(std::function<void()> hook) override;
    std::vector<const Communicator*> channels() const override {
        if (!stale_comm_) return {};
        return {stale_comm_.get()};
    }

    // Implementation types (dynamic_tables_detail.h).
    struct Acc;        // one table's gradients of a step
    struct Lookup;     // one lookup's routing
    struct HeldGrads;  // staleness > 0: one backward exchange held until its step lands
    struct HeldStep;   // staleness > 0: one step's held exchanges

  private:
    // A block named by its writer (rows [rank, rank + 1) of a layout of ranks_ columns) holding
    // `s` (a whole save or a delta).
    SparseBlock writer_block(DynamicTable::Saved s) const;
    std::function<void()> exchange_done_;  // on_backward_exchange
    int owner(uint64_t id) const;
    void backward(Lookup& lk);
    // Owner: the gradient rows g of requests (table, slot) into the step's accumulators, counts[s]
    // of them from source s in rank order; slot -1: an unadmitted id's (the default row's),
    // kDroppedSlot: none (a stale update whose row left).
    static constexpr int64_t kDroppedSlot = -2;
    void accept_grads(std::span<const int32_t> table, std::span<const int64_t> slot,
                      std::span<const int64_t> counts, const float* g);
    // Each table's accumulated rows ascending by id into merged_slots / merged.
    void merge_grads();
    void reduce_default_grads();
    // Table i's update of its merged rows and default row.
    void update_table(size_t i, float rate, int64_t update);
    // Note [Stale dynamic updates] (dynamic_stale.cpp): this lookup's gradient exchange, issued on
    // the tables' own channel and held; the oldest held step's rows into the accumulators.
    void hold(Lookup& lk, std::unique_ptr<HeldGrads> h);
    void land_oldest();
    void gather_stats();
    // All ranks' u64 words, concatenated in rank order (every rank gets them).
    std::vector<uint64_t> all_words(const std::vector<uint64_t>& mine) const;

    MemoryPool& pool_;
    std::vector<std::unique_ptr<DynamicTable>> tables_;
    std::vector<int> features_;
    Communicator* comm_ = nullptr;
    int rank_ = 0, ranks_ = 1;
    DynamicTablesOptions options_;
    SparseRowOptimizer optimizer_;
    std::vector<std::unique_ptr<Acc>> acc_;
    int64_t ids_seen_ = 0, ids_unadmitted_ = 0;  // this step's, over micro-batches
    // The group's figures as of the last step (stats summed over ranks), and the last gather's.
    std::vector<DynamicTableStats> group_stats_;
    int64_t last_ids_seen_ = 0, last_ids_unadmitted_ = 0;
    std::vector<int64_t> global_rows_;
    // embedding.tier: the tiers' counters at the last step, the step's over the group, and the
    // cache rows over the group.
    bool tiered_ = false;
    RowTierStats tier_before_, tier_step_;
    int64_t tier_cache_rows_ = 0;
    std::vector<std::vector<uint64_t>> gathered_ids_;
    // embedding.staleness > 0: the held exchanges' own channel (a duplicate of comm_ with its own
    // worker, so the next steps' lookups do not queue behind them), this step's exchanges, the
    // held steps (oldest first), and the rows whose held update was dropped since the last step
    // (this rank's; the group's sum as of the last step).
    std::unique_ptr<Communicator> stale_comm_;
    std::vector<std::unique_ptr<HeldGrads>> stale_;
    std::deque<std::unique_ptr<HeldStep>> held_;
    int64_t stale_dropped_ = 0, last_stale_dropped_ = 0;
};

}  // namespace zt
