// Which blocks each pipeline stage holds, as a pure function: stages by contiguous block ranges,
// balanced by a cost per block (the embedding counted on the first stage and the head on the
// last), or an explicit list of block counts (`parallel.pipeline.partition`). With v virtual
// stages per rank (interleaved), the model is cut into p v pieces and rank s holds pieces s,
// p + s, ..., (v - 1) p + s as its chunks 0..v-1.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "parallel/pipeline_schedule.h"

namespace zt {

struct BlockRange {
    int64_t lo = 0, hi = 0;  // blocks [lo, hi)
    int64_t size() const { return hi - lo; }
    bool operator==(const BlockRange&) const = default;
};

// What one pipeline rank holds: its chunks' block ranges (one chunk unless interleaved), and
// whether it runs the model's first piece (the embedding) and its last (the head and the loss).
struct PipeStage {
    int stage = 0;                   // pipeline rank
    int stages = 1;                  // p
    int64_t blocks = 0;              // the model's, all stages together
    std::vector<BlockRange> chunks;  // chunk c is virtual stage c * stages + stage
    bool active() const { return stages > 1; }
    int chunk_count() const { return static_cast<int>(chunks.size()); }
    int virtual_stage(int chunk) const { return chunk * stages + stage; }
    int virtual_stages_total() const { return stages * chunk_count(); }
    bool first_piece(int chunk) const { return virtual_stage(chunk) == 0; }
    bool last_piece(int chunk) const { return virtual_stage(chunk) == virtual_stages_total() - 1; }
    bool holds_first() const { return stage == 0; }          // the embedding
    bool holds_last() const { return stage == stages - 1; }  // the head (and the loss)
    bool holds_block(int64_t l) const {
        for (const BlockRange& r : chunks)
            if (l >= r.lo && l < r.hi) return true;
        return false;
    }
};

// What balancing weighs: each block's cost (forward + backward, any unit) and the extra cost of
// the embedding (first piece) and of the head with the loss (last piece), in the same unit.
struct PipeCosts {
    std::vector<double> block;  // one entry per block
    double first = 0;
    double last = 0;
};

// The cut of `blocks` blocks into n consecutive pieces of at least one block that minimises the
// largest cost(i, j, k) of a piece k = blocks [i, j); the pieces' block counts, ties to the
// earliest split. O(n blocks^2).
std::vector<int64_t> min_max_partition(
    int64_t blocks, int64_t n, const std::function<double(int64_t, int64_t, int64_t)>& cost);

// Block counts of the p pieces that minimise the most expensive piece (each piece at least one
// block); ties go to the earliest split. Interleaved runs (p v pieces in virtual-stage order,
// validate_pipe demands blocks % (p v) == 0) start from equal pieces, Megatron-LM's split, and
// move blocks between pieces while the schedule's simulated step gets shorter (Note [Balanced
// interleaved pieces]): a large head takes blocks off the rank that holds it.
std::vector<int64_t> balanced_partition(const PipeOptions& o, const PipeCosts& costs);

// Checks an explicit `parallel.pipeline.partition` (block counts per piece) against the
// options and the model's block count: p v entries, each >= 1, summing to `blocks` (any sizes,
// interleaved included); throws
// zt::Error (kInput) naming the key otherwise.
void check_partition(const PipeOptions& o, const std::vector<int64_t>& counts, int64_t blocks);

// Rank `stage`'s chunks from the pieces' block counts.
PipeStage pipe_stage(const PipeOptions& o, const std::vector<int64_t>& counts, int stage);

// Each piece's cost under `costs` (for the report and the balance test).
std::vector<double> piece_costs(const std::vector<int64_t>& counts, const PipeCosts& costs);

}  // namespace zt
