// The implementation types of ShardedTables, shared by sharded_tables.cpp (storage, merge,
// update) and embedding_exchange.cpp (lookups). Not for other users.
#pragma once

#include <memory>
#include <vector>

#include "embedding/sharded_tables.h"

namespace zt {

// Gradient rows one requesting rank sent for one shard during a step, in arrival order (a row
// comes once a micro-batch); finish_grads sums them (Note [Merge order]).
struct ShardedTables::RowAcc {
    std::vector<int64_t> rows;  // local rows, in arrival order
    std::vector<float> grads;   // rows.size() x cols
    void add(int64_t row, const float* g, int64_t cols);
    void clear();
};

struct ShardedTables::Shard {
    int table = 0;
    TableShard range;
    Tensor w, hi, lo, state;        // w (f32) or hi + lo (split bf16); state (rows, state_per_row)
    SparseRowStorage storage;       // rows and cols always; no pointers when tiered
    std::unique_ptr<RowTier> tier;  // embedding.tier: the rows live here, not in w and state
    std::vector<RowAcc> acc;        // one per requesting rank
    std::vector<int64_t> merged_rows;  // after finish_grads: ascending local rows
    std::vector<float> merged;         // their gradients, merged_rows.size() x cols
    // Incremental checkpoints: bit r set when local row r changed since the last saved() (empty
    // unless tracking; Note [Sharded table increments]).
    std::vector<uint64_t> changed;
};

// Request packing: table index in the high 24 bits, row in the low 40.
constexpr int kRequestRowBits = 40;
inline int64_t pack_request(int table, int64_t row) {
    return static_cast<int64_t>(table) << kRequestRowBits | row;
}
inline int request_table(int64_t r) { return static_cast<int>(r >> kRequestRowBits); }
inline int64_t request_row(int64_t r) { return r & ((int64_t{1} << kRequestRowBits) - 1); }

}  // namespace zt
