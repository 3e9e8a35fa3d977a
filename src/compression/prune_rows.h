// Embedding rows pruned by access frequency (docs/pruning.md, "type": "rows"): pure parts. Each
// table counts how often each of its rows was looked up; at a mask update the rows with the
// lowest counts are pruned (ties to the lower row index), rows pruned before stay pruned, until
// prune_count(fraction, rows) of the table's rows are. A pruned row is a whole (1, dim) row of
// the table's weight: the mask is bytes over the whole arena like prune_mask.h's.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "compression/prune_mask.h"

namespace zt {

struct ClickBatch;

// One table of the arena: `name` ("emb_l.K.weight"), its feature index K in a ClickBatch, and
// its (rows, dim) weight at `offset`.
struct PruneRowTable {
    std::string name;
    int feature = 0;
    int64_t offset = 0;
    int64_t rows = 0, dim = 0;
};

// A model whose embedding tables in the arena can be pruned by rows (models/dlrm). Offsets are
// arena offsets, so the engine asks after the arena is placed; tables outside the arena (sharded
// or dynamic) are not listed.
class RowPrunable {
  public:
    virtual ~RowPrunable() = default;
    virtual std::vector<PruneRowTable> prune_row_tables() const = 0;
};

// Adds one to counts[k][id] for every id of table k's feature in the batch (counts: one vector
// of rows entries per table).
void count_rows(const ClickBatch& batch, std::span<const PruneRowTable> tables,
                std::vector<std::vector<double>>& counts);

// Rows to prune in one table: every row already pruned, then the lowest counts (ties to the
// lower index) until `keep_total` rows are pruned. Returns the pruned flags, one per row.
std::vector<uint8_t> row_mask(std::span<const double> counts, std::span<const uint8_t> pruned,
                              int64_t prune_total);

// Writes each table's row flags into the whole-arena mask (every element of a pruned row).
void set_row_mask(const PruneRowTable& t, std::span<const uint8_t> rows,
                  std::vector<uint8_t>& pruned);
// The rows of t pruned in a whole-arena mask (a row is pruned when its first element is).
std::vector<uint8_t> rows_of_mask(const PruneRowTable& t, std::span<const uint8_t> pruned);

}  // namespace zt
