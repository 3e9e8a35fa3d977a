// Embedding sharding plans (issue 13): where each table's rows and columns live across the ranks,
// as a pure function of the tables, the rank count, the requested sharding and the per-rank memory
// budget. Kinds:
// - data_parallel: the table is replicated on every rank and trained as a dense parameter (its
//   gradient reduced like the MLPs'); for small tables.
// - table: the whole table on one rank, chosen greedily to balance rows x dim x access frequency
//   (in proportion to rank_weights when given).
// - row: rows split into contiguous, nearly equal ranges over all ranks (the first rows % ranks
//   ranges one row longer).
// - column: columns split into min(ranks, dim) nearly equal ranges, range j on rank j (Intel's
//   MLPerf trick for its 40M-row tables: every owner sees every id of the table).
// - auto: data_parallel for tables under kAutoReplicateBytes, row for tables larger than an even
//   share of all sharded bytes, table for the rest.
// The plan states each rank's bytes (weights, optimizer state; replicated tables on every rank with
// their dense gradient and optimizer state) and the all-to-all bytes a step sends at most (before
// the duplicate ids of a batch are merged); with a tier (embedding.tier), which of its bytes stay
// in memory. Left out: dynamic tables.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace zt {

enum class ShardKind : uint8_t { kAuto, kDataParallel, kTable, kRow, kColumn };
// "auto", "data_parallel", "table", "row", "column"
const char* shard_kind_name(ShardKind k);
// Parses the names above; a zt::Error naming `key` and listing them otherwise.
ShardKind parse_shard_kind(const std::string& name, const std::string& key);

// Tables under this many weight bytes are replicated by "auto".
constexpr int64_t kAutoReplicateBytes = int64_t{1} << 20;  // 1 MiB

struct EmbeddingTableSpec {
    std::string name;  // "emb_l.3.weight": for messages and the plan file
    int64_t rows = 0;
    int64_t dim = 0;
    double ids_per_sample = 1;  // mean bag length: how often a sample reads the table
};

struct EmbeddingPlanOptions {
    int ranks = 1;
    // One entry: every table; else one per table (kAuto allowed per table).
    std::vector<ShardKind> sharding = {ShardKind::kAuto};
    int64_t samples_per_rank = 1;       // micro-batch samples per rank, for all-to-all bytes
    int64_t micro_batches = 1;          // per optimizer step
    int64_t weight_bytes_per_elem = 4;  // sharded tables: 4 (f32) or 4 (bf16 split: hi + lo)
    int64_t state_floats_per_row = 0;   // sharded tables: sparse optimizer state per full row
                                        // (a column shard holds its share of it)
    int64_t dense_bytes_per_elem = 12;  // replicated tables: weight + gradient + optimizer state
    int64_t budget_bytes_per_rank = 0;  // 0: no budget
    // embedding.rank_weights: each rank's relative share of the table-wise tables (ranks of
    // unequal speed or memory); empty: equal. Table-wise tables then go to the rank whose bytes
    // over its weight stay the least.
    std::vector<double> rank_weights;
    // embedding.tier (row_tier.h): sharded tables live in a store outside the budget behind a
    // cache of this fraction of each shard's rows, or of these bytes per rank (0 and 0: no tier,
    // every row in memory).
    double tier_cache_ratio = 0;
    int64_t tier_cache_bytes = 0;
    bool tiered() const { return tier_cache_ratio > 0 || tier_cache_bytes > 0; }
};

// The cache rows of a tiered shard of `rows` rows at `ratio`: ceil(rows x ratio), at least 1 and at
// most rows.
int64_t tier_cache_rows(int64_t rows, double ratio);

// One rank's block of a table: rows [row_begin, row_end) x columns [col_begin, col_end).
struct TableShard {
    int rank = 0;
    int64_t row_begin = 0, row_end = 0;
    int64_t col_begin = 0, col_end = 0;
};

struct TablePlacement {
    ShardKind kind = ShardKind::kDataParallel;  // never kAuto in a plan
    std::vector<TableShard> shards;             // empty for data_parallel (every rank, whole)
};

struct EmbeddingPlan {
    std::vector<EmbeddingTableSpec> tables;
    std::vector<TablePlacement> placement;  // one per table
    std::vector<int64_t> table_bytes;       // per table: its bytes summed over the ranks
    std::vector<int64_t> rank_bytes;        // per rank: every table byte it holds
    // per rank: the bytes of rank_bytes in memory (the budget's): all of them, or with a tier
    // the replicated tables' and the sharded ones' cache (Note [Shard bytes])
    std::vector<int64_t> rank_resident_bytes;
    std::vector<int64_t> rank_alltoall_bytes;  // per rank and step: bytes it sends at most
    int64_t total_bytes = 0;                   // sum of rank_bytes (and of table_bytes)
    int64_t alltoall_bytes_per_step = 0;       // sum of rank_alltoall_bytes

    bool sharded(size_t table) const { return placement[table].kind != ShardKind::kDataParallel; }
    // The shard of `table` on `rank` (nullptr when it holds none).
    const TableShard* shard_on(size_t table, int rank) const;
    // Lines for the log: one per table ("emb_l.3.weight (1000000 x 16): row over 4 ranks, ...")
    // and the per-rank totals.
    std::vector<std::string> describe() const;
    // The plan file (RUN_DIR/embedding_plan.json): tables with kind and shards, rank_bytes,
    // alltoall_bytes_per_step.
    nlohmann::json to_json() const;
};

// The plan. Errors (zt::Error, input): a sharding list whose length is neither 1 nor the table
// count; a column split of a table with dim < 2 is fine (one shard); a plan where some rank holds
// more than budget_bytes_per_rank: the message says the bytes needed in all, what all ranks'
// budgets give, and which sharding would fit (row-wise if it does, else how many ranks row-wise
// needs, or that only a larger budget helps when one row of each table a rank is already too much).
// Byte and all-to-all formulas: Note [Shard bytes] and Note [All-to-all bytes] in shard_plan.cpp.
EmbeddingPlan plan_embeddings(const std::vector<EmbeddingTableSpec>& tables,
                              const EmbeddingPlanOptions& options);

}  // namespace zt
