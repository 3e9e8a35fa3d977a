// SparseParams: parameters that live outside the flat arena and are updated sparsely, such as
// sharded embedding tables (embedding/sharded_tables.h). The engine drives them beside the arena:
// their gradients join the global norm and clipping, they take the same learning rate schedule,
// and their state joins checkpoints and weight export. A model that has some returns them from
// Model::sparse_params() once Model::attach() has given it the pool, the group and the seed.
// Tensors are named like arena parameters ("emb_l.3.weight") and are 2-D (rows, cols); their
// optimizer state is one f32 tensor per tensor, (rows, state_cols).
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace zt {

class Communicator;

// What a model needs to place parameters that live outside the arena.
struct ModelContext {
    MemoryPool* pool = nullptr;
    Communicator* comm = nullptr;  // the data-parallel group; null: one rank
    uint64_t seed = 42;
    DType compute_dtype = DType::kF32;
    int64_t budget_bytes_per_rank = 0;  // 0: none
    int64_t micro_batch = 1;            // samples per rank and micro-batch (for plans)
    int64_t grad_accum = 1;
};

// One rank's block of a sparse tensor: rows [row_begin, row_end) x cols [col_begin, col_end),
// weights (f32, row-major) and its optimizer state rows (row-major, state_cols wide). aux: u64
// words a kind of tensor defines for itself, empty for row ranges (dynamic tables: their ids and
// counters, Note [Dynamic table state] in embedding/dynamic_table.cpp).
struct SparseBlock {
    int64_t row_begin = 0, row_end = 0, col_begin = 0, col_end = 0;
    std::vector<float> weights;
    std::vector<float> state;
    std::vector<uint64_t> aux;
};

class SparseParams {
  public:
    virtual ~SparseParams() = default;

    // After a step's last backward: merges the micro-batches' gradients (collective-free).
    virtual void finish_grads() = 0;
    // Sum of squares of this rank's merged gradients (each element counted on one rank only).
    virtual double grad_sq_sum() const = 0;
    virtual void scale_grads(float coef) = 0;
    // One update of the rows the step used. lr: the dense optimizer's rate for this step
    // (schedule applied); base_lr: its configured rate (a sparse rate of its own follows the same
    // schedule by the ratio); update: the global update count from 1.
    virtual void step(double lr, double base_lr, int64_t update) = 0;
    virtual void zero_grads() = 0;
    // Tables that apply a step's update a step late (embedding.staleness): applies the one held
    // now (before a checkpoint or the final weights); lr, base_lr, update as for step(). Others:
    // nothing to do.
    virtual void apply_held(double /*lr*/, double /*base_lr*/, int64_t /*update*/) {}

    // The tensors: names, shapes (rows, cols), optimizer state columns per row.
    virtual std::vector<std::string> names() const = 0;
    virtual Shape shape(size_t i) const = 0;
    virtual int64_t state_cols(size_t i) const = 0;
    virtual int64_t numel() const = 0;  // elements over all tensors, whole
    // Collective: tensor i whole (row-major f32) on `root`; empty elsewhere.
    virtual std::vector<float> gather(size_t i, int root) = 0;
    // Sets tensor i's weights from a whole copy every rank holds (state untouched).
    virtual void load(size_t i, const float* whole) = 0;
    // This rank's blocks of tensor i (checkpoints), and setting the overlap of this rank's blocks
    // with a block written by any layout (resume).
    virtual std::vector<SparseBlock> blocks(size_t i) const = 0;
    virtual void load_block(size_t i, const SparseBlock& b) = 0;
    // Whether this rank holds any of b's range of tensor i (b's data is not read).
    virtual bool overlaps(size_t i, const SparseBlock& b) const = 0;
    // Tensors too large to copy whole at once (tables on a tier, embedding.tier; the same answer
    // on every rank): checkpoints take this rank's whole blocks as pieces, read one at a time
    // (pieces(): their ranges, data empty; read_piece(): one with its data; delta_blocks() pair
    // with the pieces), in place of blocks(); exports take the tensor in runs of rows
    // (gather_rows: collective, rows [r0, r0 + n) whole into out on root, n x cols floats).
    virtual bool streamed(size_t /*i*/) const { return false; }
    virtual std::vector<SparseBlock> pieces(size_t /*i*/) const { return {}; }
    virtual SparseBlock read_piece(size_t /*i*/, const SparseBlock& piece) const { return piece; }
    virtual void gather_rows(size_t /*i*/, int64_t /*r0*/, int64_t /*n*/, int /*root*/,
                             float* /*out*/) {}
    // The sparse optimizer's name ("sgd", ...): a checkpoint's state is only for the same one.
    virtual std::string optimizer_name() const = 0;

    // Incremental checkpoints (Note [Incremental checkpoints], runtime/checkpoint_chain.cpp):
    // tensors whose blocks can hold only what changed since the last checkpoint. track_changes:
    // keep what the deltas need from now on (before training or right after a resume).
    // delta_blocks: this rank's blocks of what changed since the last saved(); apply_delta
    // advances a whole block (blocks()'s form, any writer) by the next delta of the same writer.
    // saved(): the state as of now is in a checkpoint (loading one marks it too).
    virtual bool incremental(size_t /*i*/) const { return false; }
    virtual void track_changes(bool /*on*/) {}
    virtual std::vector<SparseBlock> delta_blocks(size_t /*i*/) const { return {}; }
    virtual void apply_delta(size_t /*i*/, SparseBlock& /*base*/,
                             const SparseBlock& /*delta*/) const {}
    virtual bool is_delta(size_t /*i*/, const SparseBlock& /*b*/) const { return false; }
    virtual void saved() {}

    // Tensors whose rows are keyed by raw ids (dynamic tables) rather than indexed: the ids of
    // gather(i)'s rows (ascending), the ids dropped since the last take that are not rows now
    // (taken: the log empties), and the row unadmitted ids read (empty: zeros). Others: empty.
    virtual bool keyed(size_t /*i*/) const { return false; }
    virtual std::vector<uint64_t> row_ids(size_t /*i*/) const { return {}; }
    virtual std::vector<uint64_t> take_deleted(size_t /*i*/) { return {}; }
    virtual std::vector<float> unadmitted_row(size_t /*i*/) const { return {}; }

    // For the log and the run directory: the placement, and per-step counters for metrics.
    virtual std::vector<std::string> describe() const = 0;
    virtual nlohmann::json plan_json() const = 0;
    virtual nlohmann::json step_counters() const = 0;

    // comm.priority (Note [Priority], parallel/zero_grad_buckets.cpp): `done` runs right after
    // each backward all-to-all of gradient rows is issued (or has completed), at the same
    // program point on every rank; dense gradient buckets that filled before it wait for it.
    virtual void on_backward_exchange(std::function<void()> done) = 0;
    // Communicators of their own (a second channel of the group, so that some transfers do not
    // queue behind the others): their traffic counts in the run's metrics. Others: none.
    virtual std::vector<const Communicator*> channels() const { return {}; }
    // embedding.tier: `hook` runs in the middle of each write-back of evicted rows to the tier's
    // store (fault injection's "kill_in_writeback"). Tensors without a tier ignore it.
    virtual void on_tier_writeback(std::function<void()> /*hook*/) {}
};

}  // namespace zt
