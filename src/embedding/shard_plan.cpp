// Embedding sharding plans (embedding/shard_plan.h): auto resolved per table, row and column
// ranges, greedy table-wise placement, per-rank bytes and all-to-all bytes, and the budget check.
// Pure functions of their inputs: the same tables and options give the same plan on every rank. The
// log lines and the plan file are in shard_plan_report.cpp.
#include "embedding/shard_plan.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "util/error.h"
#include "util/units.h"

namespace zt {
namespace {

constexpr int64_t kIdBytes = 8;     // one requested id (int64) in the all-to-all
constexpr int64_t kFloatBytes = 4;  // one f32 of a looked-up row or its gradient, or of state

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

int64_t table_weight_bytes(const EmbeddingTableSpec& t, const EmbeddingPlanOptions& o) {
    return t.rows * t.dim * o.weight_bytes_per_elem;
}

// Note [Shard bytes]
// A shard of r rows and c columns holds r * c * weight_bytes_per_elem of weights and its share of
// the sparse optimizer state: r * state_floats_per_row * 4 bytes for whole rows, scaled by c / dim
// for a column shard and rounded up, so a rank's bytes are never under-counted (the column shards
// of a table together may hold up to one byte a shard more than the whole table's state).
// With a tier (embedding.tier) a shard's bytes live in its store and only its cache is in memory:
// with cache_ratio the bytes of tier_cache_rows(r, ratio) rows, with cache_bytes min(cache_bytes,
// the rank's sharded bytes) for the rank; the budget check counts those (rank_resident_bytes).
int64_t shard_bytes(const EmbeddingTableSpec& t, const TableShard& s,
                    const EmbeddingPlanOptions& o) {
    const int64_t r = s.row_end - s.row_begin, c = s.col_end - s.col_begin;
    const int64_t state = ceil_div(r * o.state_floats_per_row * kFloatBytes * c, t.dim);
    return r * c * o.weight_bytes_per_elem + state;
}

// Part j of `len` split into n contiguous, nearly equal parts, the first len % n one longer.
std::pair<int64_t, int64_t> split_part(int64_t len, int64_t n, int64_t j) {
    const int64_t base = len / n, extra = len % n;
    const int64_t begin = j * base + std::min(j, extra);
    return {begin, begin + base + (j < extra ? 1 : 0)};
}

void check_inputs(const std::vector<EmbeddingTableSpec>& tables, const EmbeddingPlanOptions& o) {
    ZT_CHECK(o.ranks >= 1, "embedding: the plan needs at least 1 rank, got ", o.ranks);
    const size_t n = tables.size();
    ZT_CHECK(o.sharding.size() == 1 || o.sharding.size() == n, "embedding: the sharding lists ",
             o.sharding.size(), " kinds for ", n, " tables; expected 1 (for every table) or ", n,
             " (one per table, in table order)");
    for (const EmbeddingTableSpec& t : tables) {
        ZT_CHECK(t.rows >= 1 && t.dim >= 1, "embedding: table '", t.name, "' is ", t.rows, " x ",
                 t.dim, "; expected at least 1 row and 1 column; fix the table sizes");
        ZT_CHECK(std::isfinite(t.ids_per_sample) && t.ids_per_sample >= 0, "embedding: table '",
                 t.name, "' reads ", t.ids_per_sample, " ids a sample; expected a mean >= 0");
    }
    ZT_CHECK(o.rank_weights.empty() || static_cast<int>(o.rank_weights.size()) == o.ranks,
             "embedding.rank_weights: expected one weight per rank (", o.ranks, "), got ",
             o.rank_weights.size());
    for (size_t r = 0; r < o.rank_weights.size(); ++r)
        ZT_CHECK(std::isfinite(o.rank_weights[r]) && o.rank_weights[r] > 0,
                 "embedding.rank_weights[", r, "]: expected a positive number, got ",
                 o.rank_weights[r]);
    ZT_CHECK(o.samples_per_rank >= 0 && o.micro_batches >= 1,
             "embedding: expected samples_per_rank >= 0 and micro_batches >= 1, got ",
             o.samples_per_rank, " and ", o.micro_batches);
    ZT_CHECK(o.weight_bytes_per_elem >= 1 && o.state_floats_per_row >= 0 &&
                 o.dense_bytes_per_elem >= 0 && o.budget_bytes_per_rank >= 0,
             "embedding: expected weight_bytes_per_elem >= 1 and state, dense and budget bytes "
             ">= 0, got ",
             o.weight_bytes_per_elem, ", ", o.state_floats_per_row, ", ", o.dense_bytes_per_elem,
             ", ", o.budget_bytes_per_rank);
}

// Each table's kind with auto resolved: data_parallel under kAutoReplicateBytes; else row when its
// weights exceed an even share of all sharded tables' weights (bytes * ranks > sum: never with one
// rank), else table.
std::vector<ShardKind> resolve_kinds(const std::vector<EmbeddingTableSpec>& tables,
                                     const EmbeddingPlanOptions& o) {
    std::vector<ShardKind> kinds(tables.size());
    for (size_t t = 0; t < tables.size(); ++t) {
        kinds[t] = o.sharding.size() == 1 ? o.sharding[0] : o.sharding[t];
        if (kinds[t] == ShardKind::kAuto && table_weight_bytes(tables[t], o) < kAutoReplicateBytes)
            kinds[t] = ShardKind::kDataParallel;
    }
    int64_t sharded_bytes = 0;
    for (size_t t = 0; t < tables.size(); ++t)
        if (kinds[t] != ShardKind::kDataParallel) sharded_bytes += table_weight_bytes(tables[t], o);
    for (size_t t = 0; t < tables.size(); ++t) {
        if (kinds[t] != ShardKind::kAuto) continue;
        const bool big = table_weight_bytes(tables[t], o) * o.ranks > sharded_bytes;
        kinds[t] = big ? ShardKind::kRow : ShardKind::kTable;
    }
    return kinds;
}

// Row shards over all ranks (empty ranges skipped), or column shards j on rank j.
std::vector<TableShard> split_shards(const EmbeddingTableSpec& t, ShardKind kind, int ranks) {
    std::vector<TableShard> out;
    if (kind == ShardKind::kRow) {
        for (int r = 0; r < ranks; ++r) {
            const auto [b, e] = split_part(t.rows, ranks, r);
            if (e > b) out.push_back({r, b, e, 0, t.dim});
        }
    } else if (kind == ShardKind::kColumn) {
        const int64_t n = std::min<int64_t>(ranks, t.dim);
        for (int64_t j = 0; j < n; ++j) {
            const auto [b, e] = split_part(t.dim, n, j);
            out.push_back({static_cast<int>(j), 0, t.rows, b, e});
        }
    }
    return out;
}

// Table-wise tables, in decreasing weight bytes (ties: more ids_per_sample * dim first, then the
// lower index), each to the rank holding the fewest bytes so far (ties: the lowest rank). "So far"
// counts the row and column shards and replicated tables placed before, so table-wise tables fill
// the ranks that column sharding left light.
void place_tables(const std::vector<EmbeddingTableSpec>& tables, const EmbeddingPlanOptions& o,
                  EmbeddingPlan& plan) {
    std::vector<size_t> order;
    for (size_t t = 0; t < tables.size(); ++t)
        if (plan.placement[t].kind == ShardKind::kTable) order.push_back(t);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
        const int64_t wa = table_weight_bytes(tables[a], o), wb = table_weight_bytes(tables[b], o);
        if (wa != wb) return wa > wb;
        const double fa = tables[a].ids_per_sample * static_cast<double>(tables[a].dim);
        const double fb = tables[b].ids_per_sample * static_cast<double>(tables[b].dim);
        if (fa != fb) return fa > fb;
        return a < b;
    });
    const auto weight = [&](size_t r) { return o.rank_weights.empty() ? 1.0 : o.rank_weights[r]; };
    for (size_t t : order) {
        // The rank whose bytes with the table, over its weight, are the least (ties: the lowest).
        const TableShard whole{0, 0, tables[t].rows, 0, tables[t].dim};
        const double add = static_cast<double>(shard_bytes(tables[t], whole, o));
        size_t best = 0;
        for (size_t r = 1; r < plan.rank_bytes.size(); ++r)
            if ((static_cast<double>(plan.rank_bytes[r]) + add) / weight(r) <
                (static_cast<double>(plan.rank_bytes[best]) + add) / weight(best))
                best = r;
        TableShard s = whole;
        s.rank = static_cast<int>(best);
        plan.placement[t].shards = {s};
        plan.rank_bytes[best] += shard_bytes(tables[t], s, o);
    }
}

// Note [All-to-all bytes]
// An upper bound per rank and optimizer step, before a batch's duplicate ids are merged. Rank r
// looks up n_t = ids_per_sample * samples_per_rank ids of sharded table t per micro-batch, ids
// uniform over the rows. A shard s (owner o, rows R_s, columns c_s) answers the fraction
// R_s / rows of them (1 for table-wise and column shards: every column owner sees every id).
// For every requester r != o and each id s answers:
//   r sends 8 bytes (the id) and, in backward, c_s * 4 bytes (the row's gradient);
//   o sends c_s * 4 bytes (the row's columns) in forward.
// So, with f_s = n_t * R_s / rows,
//   rank_alltoall_bytes[q] = micro_batches * sum_t sum_s ([q != o_s] * f_s * (8 + 4 c_s)
//                                        + [q == o_s] * (ranks - 1) * f_s * 4 c_s),
// accumulated in double and rounded up per rank. Ids a rank reads from its own shard cost nothing.
std::vector<int64_t> alltoall_bytes(const EmbeddingPlan& plan, const EmbeddingPlanOptions& o) {
    std::vector<double> sent(static_cast<size_t>(o.ranks), 0.0);
    for (size_t t = 0; t < plan.tables.size(); ++t) {
        const EmbeddingTableSpec& spec = plan.tables[t];
        const double ids = spec.ids_per_sample * static_cast<double>(o.samples_per_rank);
        for (const TableShard& s : plan.placement[t].shards) {
            const double answered =
                ids * static_cast<double>(s.row_end - s.row_begin) / static_cast<double>(spec.rows);
            const double row_bytes = static_cast<double>((s.col_end - s.col_begin) * kFloatBytes);
            for (int r = 0; r < o.ranks; ++r) {
                if (r == s.rank) continue;
                sent[static_cast<size_t>(r)] += answered * (kIdBytes + row_bytes);
                sent[static_cast<size_t>(s.rank)] += answered * row_bytes;
            }
        }
    }
    std::vector<int64_t> out(sent.size());
    for (size_t r = 0; r < sent.size(); ++r)
        out[r] = static_cast<int64_t>(std::ceil(sent[r] * static_cast<double>(o.micro_batches)));
    return out;
}

// The largest rank's bytes were every table row-wise over `ranks` ranks: rank 0 holds the longest
// range of each, ceil(rows / ranks) rows.
int64_t row_wise_rank_bytes(const std::vector<EmbeddingTableSpec>& tables,
                            const EmbeddingPlanOptions& o, int64_t ranks) {
    int64_t bytes = 0;
    for (const EmbeddingTableSpec& t : tables)
        bytes += shard_bytes(t, {0, 0, ceil_div(t.rows, ranks), 0, t.dim}, o);
    return bytes;
}

const char* ranks_word(int64_t n) { return n == 1 ? "rank" : "ranks"; }

// Which sharding would fit, for the budget error: row-wise over these ranks, or the fewest ranks
// row-wise needs (row bytes fall as ranks grow, so a binary search), or none at all.
std::string budget_fix(const std::vector<EmbeddingTableSpec>& tables,
                       const EmbeddingPlanOptions& o) {
    const int64_t budget = o.budget_bytes_per_rank;
    const int64_t here = row_wise_rank_bytes(tables, o, o.ranks);
    if (here <= budget)
        return str_cat("'row' sharding would fit (", format_bytes(static_cast<double>(here)),
                       " a rank); choose it or raise the budget");
    int64_t max_rows = 1;
    for (const EmbeddingTableSpec& t : tables) max_rows = std::max(max_rows, t.rows);
    int64_t lo = o.ranks, hi = std::max<int64_t>(max_rows, o.ranks);  // lo fails
    const int64_t floor_bytes = row_wise_rank_bytes(tables, o, hi);
    if (floor_bytes > budget)
        return str_cat("even one row of each table a rank needs ",
                       format_bytes(static_cast<double>(floor_bytes)), "; raise the budget");
    while (hi - lo > 1) {
        const int64_t mid = lo + (hi - lo) / 2;
        (row_wise_rank_bytes(tables, o, mid) <= budget ? hi : lo) = mid;
    }
    return str_cat("even row-wise sharding needs at least ", hi, " ranks (",
                   format_bytes(static_cast<double>(row_wise_rank_bytes(tables, o, hi))),
                   " a rank); add ranks or raise the budget");
}

void check_budget(const EmbeddingPlan& plan, const EmbeddingPlanOptions& o) {
    const int64_t budget = o.budget_bytes_per_rank;
    if (budget == 0 || plan.rank_resident_bytes.empty()) return;
    const auto most =
        std::max_element(plan.rank_resident_bytes.begin(), plan.rank_resident_bytes.end());
    if (*most <= budget) return;
    ZT_FAIL("embedding: the tables need ", format_bytes(static_cast<double>(plan.total_bytes)),
            " in all (rank ", most - plan.rank_resident_bytes.begin(), " would hold ",
            format_bytes(static_cast<double>(*most)), ") but each rank's budget is ",
            format_bytes(static_cast<double>(budget)), " (",
            format_bytes(static_cast<double>(budget) * o.ranks), " over ", o.ranks, " ",
            ranks_word(o.ranks), "); ", budget_fix(plan.tables, o));
}

}  // namespace

int64_t tier_cache_rows(int64_t rows, double ratio) {
    const auto n = static_cast<int64_t>(std::ceil(static_cast<double>(rows) * ratio));
    return std::clamp<int64_t>(n, std::min<int64_t>(rows, 1), rows);
}

EmbeddingPlan plan_embeddings(const std::vector<EmbeddingTableSpec>& tables,
                              const EmbeddingPlanOptions& options) {
    check_inputs(tables, options);
    const std::vector<ShardKind> kinds = resolve_kinds(tables, options);
    EmbeddingPlan plan;
    plan.tables = tables;
    plan.placement.resize(tables.size());
    plan.table_bytes.assign(tables.size(), 0);
    plan.rank_bytes.assign(static_cast<size_t>(options.ranks), 0);
    for (size_t t = 0; t < tables.size(); ++t) {
        TablePlacement& p = plan.placement[t];
        p.kind = kinds[t];
        if (p.kind == ShardKind::kDataParallel) {
            const int64_t bytes = tables[t].rows * tables[t].dim * options.dense_bytes_per_elem;
            for (int64_t& b : plan.rank_bytes) b += bytes;
            plan.table_bytes[t] = bytes * options.ranks;
            continue;
        }
        p.shards = split_shards(tables[t], p.kind, options.ranks);
        for (const TableShard& s : p.shards)
            plan.rank_bytes[static_cast<size_t>(s.rank)] += shard_bytes(tables[t], s, options);
    }
    place_tables(tables, options, plan);
    for (size_t t = 0; t < tables.size(); ++t)
        for (const TableShard& s : plan.placement[t].shards)
            plan.table_bytes[t] += shard_bytes(tables[t], s, options);
    plan.total_bytes = std::accumulate(plan.rank_bytes.begin(), plan.rank_bytes.end(), int64_t{0});
    plan.rank_resident_bytes = plan.rank_bytes;
    if (options.tiered()) {  // Note [Shard bytes]: the sharded part is the cache's
        std::vector<int64_t> sharded(plan.rank_bytes.size(), 0), cache(plan.rank_bytes.size(), 0);
        for (size_t t = 0; t < tables.size(); ++t)
            for (const TableShard& s : plan.placement[t].shards) {
                const auto r = static_cast<size_t>(s.rank);
                sharded[r] += shard_bytes(tables[t], s, options);
                TableShard c = s;
                c.row_end = c.row_begin +
                            tier_cache_rows(s.row_end - s.row_begin, options.tier_cache_ratio);
                cache[r] += shard_bytes(tables[t], c, options);
            }
        for (size_t r = 0; r < sharded.size(); ++r)
            plan.rank_resident_bytes[r] +=
                (options.tier_cache_ratio > 0 ? cache[r]
                                              : std::min(sharded[r], options.tier_cache_bytes)) -
                sharded[r];
    }
    plan.rank_alltoall_bytes = alltoall_bytes(plan, options);
    plan.alltoall_bytes_per_step = std::accumulate(plan.rank_alltoall_bytes.begin(),
                                                   plan.rank_alltoall_bytes.end(), int64_t{0});
    check_budget(plan, options);
    return plan;
}

}  // namespace zt
