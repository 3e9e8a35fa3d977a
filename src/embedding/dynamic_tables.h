// DynamicTables: a model's dynamic embedding tables (dynamic_table.h) as sparse parameters
// (nn/sparse_params.h) on one process. A lookup deduplicates a micro-batch's ids per table,
// sights them (training) or only finds them (evaluation), lays the rows out as a small table of
// the distinct ids and pools it with the ordinary embedding_bag op (Note [Unique-row exchange] in
// embedding_exchange.cpp, without the exchange); an unadmitted id reads zeros or the table's
// shared default row. Backward adds each distinct row's gradient into a per-step accumulator,
// micro-batches in order, from zero: the order in which ShardedTables merges a row on one rank
// (Note [Merge order]), so a dynamic table that admits every id and evicts nothing takes a static
// table's update bits. The step applies the fused sparse optimizer to the rows used (ascending
// ids) and then ends the tables' step (evictions). Checkpoints carry one block per table with its
// ids and counters in the block's aux words. Leaves out: sharding over ranks (refused by the
// model), bf16 rows.
#pragma once

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
};

class DynamicTables : public SparseParams {
  public:
    // tables: one per dynamic table (its name, dim, admission, eviction, init and seed);
    // features: the batch feature (ClickBatch::ids index) each table reads.
    DynamicTables(MemoryPool& pool, std::vector<DynamicTableOptions> tables,
                  std::vector<int> features, const DynamicTablesOptions& options);
    ~DynamicTables() override;

    size_t size() const { return tables_.size(); }
    DynamicTable& table(size_t i) { return *tables_[i]; }

    // The pooled embeddings (B, dim) of every dynamic table for this micro-batch, in table order.
    // A recording tape is training: ids are sighted (and may be admitted); otherwise they are
    // only looked up.
    std::vector<Var> lookup(Tape& tape, const ClickBatch& batch,
                            std::span<const ops::BagPooling> pooling);

    void finish_grads() override;
    double grad_sq_sum() const override;
    void scale_grads(float coef) override;
    void step(double lr, double base_lr, int64_t update) override;
    void zero_grads() override;

    // Tensor i is table i's live rows, ascending by id: (rows, dim).
    std::vector<std::string> names() const override;
    Shape shape(size_t i) const override;
    int64_t state_cols(size_t i) const override;
    int64_t numel() const override;
    std::vector<float> gather(size_t i, int root) override;
    bool keyed(size_t) const override { return true; }
    std::vector<uint64_t> row_ids(size_t i) const override;  // ascending: gather(i)'s rows
    std::vector<uint64_t> take_deleted(size_t i) override;
    std::vector<float> unadmitted_row(size_t i) const override;
    void load(size_t i, const float* whole) override;
    std::vector<SparseBlock> blocks(size_t i) const override;
    void load_block(size_t i, const SparseBlock& b) override;
    bool overlaps(size_t, const SparseBlock&) const override { return true; }
    std::string optimizer_name() const override {
        return sparse_optim_name(options_.optimizer.kind);
    }

    std::vector<std::string> describe() const override;
    nlohmann::json plan_json() const override;
    nlohmann::json step_counters() const override;

  private:
    struct Acc;  // one table's gradients of a step
    struct Lookup;
    void backward(Lookup& lk);

    MemoryPool& pool_;
    std::vector<std::unique_ptr<DynamicTable>> tables_;
    std::vector<int> features_;
    DynamicTablesOptions options_;
    SparseRowOptimizer optimizer_;
    std::vector<std::unique_ptr<Acc>> acc_;
    int64_t ids_seen_ = 0, ids_unadmitted_ = 0;  // this step's, over micro-batches
    int64_t last_ids_seen_ = 0, last_ids_unadmitted_ = 0;
};

}  // namespace zt
