// ShardedTables: embedding tables outside the dense arena, placed by an EmbeddingPlan
// (shard_plan.h), each rank holding its shards' rows with their sparse optimizer state beside them
// (MemCategory::kEmbedding). A lookup (embedding_exchange.cpp, Note [Unique-row exchange]) routes
// a micro-batch's distinct ids to their owners with one all-to-all, returns the rows with a
// second, and pools them on the requesting rank with the ordinary embedding_bag op over the
// fetched rows; backward returns each fetched row's gradient to its owner, which keeps one sparse
// accumulator per requesting rank and merges them in rank order at the step, then applies the
// fused sparse optimizer (optim/sparse_rows.h) to the rows used. No dense gradient of a table
// exists anywhere. Initial values come from (seed, name, global element index) as in the arena,
// so every plan starts from the one-process weights.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "autograd/module.h"
#include "autograd/ops.h"
#include "comm/compressed_all_to_all.h"
#include "embedding/row_tier.h"
#include "embedding/shard_plan.h"
#include "nn/model.h"
#include "nn/sparse_params.h"
#include "optim/sparse_rows.h"

namespace zt {

// embedding.tier (docs/embedding-tier.md): where the sharded tables' rows live beyond the cache.
struct EmbeddingTierOptions {
    std::string device = "none";  // "none": in memory; "cpu": host memory; "nvme": a swap file
    std::string nvme_path;        // the directory of the swap files (device "nvme")
    double cache_ratio = 0;       // the cache: this fraction of each shard's rows,
    int64_t cache_bytes = 0;      // or these bytes per rank, split over its shards by size
    RowCachePolicy policy = RowCachePolicy::kLru;
    int queue_depth = 1024;  // page transfers in flight (a micro-batch's read-ahead at once)
    // Checkpoints and exports take a shard in pieces of at most this many bytes of rows and
    // state (Note [Tiered shards in pieces]).
    int64_t piece_bytes = int64_t{64} << 20;
    bool on() const { return device != "none"; }
};

struct ShardedTablesOptions {
    DType storage = DType::kF32;  // kF32, or kBF16 (split-SGD halves; lookups read bf16)
    SparseOptimOptions optimizer;
    double lr = 0;  // the tables' own rate; 0: the dense optimizer's
    uint64_t seed = 42;
    DType compute_dtype = DType::kF32;  // dtype of the rows handed to pooling
    // embedding.comm_precision: the codec of the rows sent to the requesting ranks (forward)
    // and of their gradients sent to the owners (backward); kF32 keeps the plain all-to-all.
    CodecKind forward_comm = CodecKind::kF32;
    CodecKind backward_comm = CodecKind::kF32;
    EmbeddingTierOptions tier;
    // embedding.staleness: 0, every step updates the rows it used (synchronous); s > 0, a step's
    // update is applied at the end of the s-th step after it (Note [Stale embedding updates]).
    int staleness = 0;
};

// embedding.tier's cache_bytes over shards of these bytes: each one's cache ratio (Note [Cache
// split] in sharded_tables.cpp).
std::vector<double> split_cache_bytes(const std::vector<double>& bytes, double budget);

class ShardedTables : public SparseParams {
  public:
    // inits: one per table of the plan (sharded or not; replicated ones are ignored here).
    ShardedTables(MemoryPool& pool, EmbeddingPlan plan, std::vector<ParamInit> inits,
                  Communicator* comm, const ShardedTablesOptions& options);
    ~ShardedTables() override;

    const EmbeddingPlan& plan() const { return plan_; }

    // Collective over the group: the pooled embeddings (B, dim) of the sharded tables `tables`
    // (ascending indices into the plan) for this rank's micro-batch, recorded on the tape when
    // it records (backward sends the rows' gradients to their owners).
    std::vector<Var> lookup(Tape& tape, std::span<const int> tables, const ClickBatch& batch,
                            std::span<const ops::BagPooling> pooling);

    // embedding.tier, collective over the group: every rank's next micro-batch's ids of `tables`
    // go to their owners, whose tiers start reading those rows (Note [Row prefetch]). A rank
    // without a next batch passes an empty ClickBatch (it still takes part).
    void prefetch(const ClickBatch& next, std::span<const int> tables);

    void finish_grads() override;
    double grad_sq_sum() const override;
    void scale_grads(float coef) override;
    void step(double lr, double base_lr, int64_t update) override;
    void zero_grads() override;
    void apply_held(double lr, double base_lr, int64_t update) override;

    std::vector<std::string> names() const override;
    Shape shape(size_t i) const override;
    int64_t state_cols(size_t i) const override;
    int64_t numel() const override;
    std::vector<float> gather(size_t i, int root) override;
    void load(size_t i, const float* whole) override;
    std::vector<SparseBlock> blocks(size_t i) const override;
    void load_block(size_t i, const SparseBlock& b) override;
    bool overlaps(size_t i, const SparseBlock& b) const override;
    // Tiered shards (Note [Tiered shards in pieces], sharded_tables_io.cpp).
    bool streamed(size_t) const override { return options_.tier.on(); }
    std::vector<SparseBlock> pieces(size_t i) const override;
    SparseBlock read_piece(size_t i, const SparseBlock& piece) const override;
    void gather_rows(size_t i, int64_t r0, int64_t n, int root, float* out) override;
    std::string optimizer_name() const override {
        return sparse_optim_name(options_.optimizer.kind);
    }
    // Incremental checkpoints (Note [Sharded table increments], sharded_tables_delta.cpp): the
    // rows step() updated since the last saved(), with their state and shard-local indices.
    bool incremental(size_t) const override { return true; }
    void track_changes(bool on) override;
    std::vector<SparseBlock> delta_blocks(size_t i) const override;
    void apply_delta(size_t i, SparseBlock& base, const SparseBlock& delta) const override;
    bool is_delta(size_t i, const SparseBlock& b) const override;
    void saved() override;

    // The last step's bytes and error of the compressed row and gradient exchanges, summed over
    // the group (zero when comm_precision is fp32).
    const CompressionStats& comm_compression() const { return comm_stats_; }

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

    // Implementation types (embedding_exchange.cpp and sharded_tables.cpp).
    struct RowAcc;    // gradient rows from one requesting rank
    struct Shard;     // one local shard: rows, state, accumulators, merged gradients
    struct Exchange;  // one lookup's routing, kept for its backward

  private:
    std::function<void()> exchange_done_;  // on_backward_exchange
    // ratio: the tier's cache fraction of the shard's rows (unused without a tier).
    void init_shard(Shard& s, const ParamInit& init, double ratio);
    void init_tiered_shard(Shard& s, const ParamInit& init, double ratio);
    Shard* local_shard(int table);
    // Rows per checkpoint piece of s (Note [Tiered shards in pieces]): all of them without a tier.
    int64_t piece_rows(const Shard& s) const;
    // Owner side of the forward and backward exchanges.
    // The rows of `requests` (counts[s] of them from source s, in rank order), and the floats
    // served to each source.
    void serve_rows(std::span<const int64_t> requests, std::span<const int64_t> counts,
                    std::vector<int64_t>& serve_counts, std::vector<float>& reply);
    // Tiered shards (embedding.tier): the cache slot of each request's row, fetched (Note [Row
    // fetch] in row_tier.cpp); -1 for requests of shards in memory.
    // Collective: the packed (table, row) requests `flat` (send_counts[r] to rank r, in rank
    // order) to their owners: one all-to-all of the counts, one of the requests; flat is consumed.
    void exchange_requests(const std::vector<int64_t>& send_counts, std::vector<int64_t>& flat,
                           std::vector<int64_t>& recv_counts, std::vector<int64_t>& recv_requests);
    void fetch_tiered(std::span<const int64_t> requests, std::vector<int64_t>& slots);
    // Rows [r0, r0 + n) of a shard as f32 weights (and state, may be null), whatever the storage.
    void read_rows(const Shard& s, int64_t r0, int64_t n, float* w, float* state) const;
    void write_rows(Shard& s, int64_t r0, int64_t n, const float* w, const float* state);
    // The tiers' counters this step (summed over the shards), for finish_grads.
    RowTierStats tier_totals() const;
    void accept_grads(int source, std::span<const int64_t> requests, const float* grads);
    void backward_exchange(Exchange& ex);
    // Note [Gradient rows in flight]: waits for the last backward's plain all-to-all, if one is
    // in flight, and accepts its rows.
    void complete_grads();
    struct PendingGrads {
        CommHandle handle;  // null: completed already (a codec's exchange)
        std::vector<int64_t> recv_requests, recv_counts, serve_counts;  // the Exchange's
        std::vector<float> send, recv;  // staleness > 0: the exchange's own buffers
    };
    std::unique_ptr<PendingGrads> pending_;
    // Waits for p's exchange and accepts its rows (from `received`) in source order.
    void accept_pending(PendingGrads& p, const std::vector<float>& received);
    // embedding.staleness s > 0 (Note [Stale embedding updates]): this step's exchanges, and the
    // last s steps' (oldest first; the oldest is completed and applied when a step joins).
    using StepGrads = std::vector<std::unique_ptr<PendingGrads>>;
    StepGrads stale_;
    std::deque<StepGrads> held_;
    void complete_stale(StepGrads& list);
    // Applies the oldest held step's rows as one update (merge and step).
    void apply_oldest(double lr, double base_lr, int64_t update);
    // The step's gradient of each used row of s, into merged_rows / merged (Note [Merge order]).
    void merge_grads(Shard& s);
    // One in-memory shard's sparse update of its merged rows (Note [Small shards side by side]).
    void step_shard(Shard& s, float rate, int64_t update);
    // Incremental checkpoints: marks s's merged_rows as changed when tracking.
    void mark_changed(Shard& s);
    bool track_ = false;  // track_changes(true): step() marks the rows it updates

    MemoryPool& pool_;
    EmbeddingPlan plan_;
    Communicator* comm_;
    // embedding.staleness > 0: the held gradient exchanges' own channel (a duplicate of comm_
    // with its own worker), so the next steps' row fetches do not queue behind them.
    std::unique_ptr<Communicator> stale_comm_;
    ShardedTablesOptions options_;
    SparseRowOptimizer optimizer_;
    int rank_ = 0, ranks_ = 1;
    std::vector<int> sharded_;                    // plan indices of the sharded tables
    std::vector<std::unique_ptr<Shard>> shards_;  // this rank's shards, in table order
    std::vector<int> shard_of_table_;             // plan index -> index into shards_, or -1
    // The exchanges' float buffers, reused (fresh vectors took fresh pages from the system every
    // step): what this rank sends (rows it serves, gradients it returns) and what it receives.
    std::vector<float> send_buf_, recv_buf_;
    // embedding.comm_precision: codecs and their exchanges, null for f32 (the plain path).
    std::unique_ptr<Codec> fwd_codec_, bwd_codec_;
    std::unique_ptr<CompressedAllToAll> fwd_a2a_, bwd_a2a_;
    CompressionStats acc_comm_stats_,
        comm_stats_;  // this step's on this rank; the last step's, group sum
    // merge_grads' scratch, reused.
    std::vector<uint64_t> merge_keys_, merge_tmp_;
    std::vector<const float*> merge_grad_;
    std::vector<int32_t> merge_source_;
    // Counters of the last step over the whole group (step_counters()): rows touched per sharded
    // table and in all, ids requested and bytes sent summed over ranks, the slowest rank's
    // seconds in the exchanges.
    std::vector<int64_t> table_rows_touched_;
    // embedding.tier: the tiers' counters at the last finish_grads, and the step's over the group.
    RowTierStats tier_before_, tier_step_;
    int64_t tier_capacity_ = 0;
    std::vector<int64_t> slots_;  // step()'s and serve_rows' cache slots, reused
    int64_t rows_touched_ = 0, unique_ids_ = 0, alltoall_bytes_ = 0;
    double alltoall_s_ = 0;
    int64_t acc_unique_ids_ = 0, acc_bytes_ = 0;
    double acc_s_ = 0;
};

}  // namespace zt
