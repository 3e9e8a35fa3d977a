// Embedding sharding plans as text: the kind names, the log lines and the plan file
// (RUN_DIR/embedding_plan.json). The planning itself is in shard_plan.cpp.
#include <algorithm>
#include <cstdint>
#include <utility>

#include "embedding/shard_plan.h"
#include "util/error.h"
#include "util/units.h"

namespace zt {
namespace {

constexpr ShardKind kAllKinds[] = {ShardKind::kAuto, ShardKind::kDataParallel, ShardKind::kTable,
                                   ShardKind::kRow, ShardKind::kColumn};

std::string bytes_str(int64_t bytes) { return format_bytes(static_cast<double>(bytes)); }

// The fewest and most rows (or columns) a shard of `p` holds.
std::pair<int64_t, int64_t> shard_extent(const TablePlacement& p, bool columns) {
    int64_t lo = INT64_MAX, hi = 0;
    for (const TableShard& s : p.shards) {
        const int64_t n = columns ? s.col_end - s.col_begin : s.row_end - s.row_begin;
        lo = std::min(lo, n);
        hi = std::max(hi, n);
    }
    return {lo, hi};
}

// "row over 4 ranks (250001 rows a rank, some 250000)", "table on rank 2", ...
std::string placement_str(const TablePlacement& p) {
    const size_t n = p.shards.size();
    switch (p.kind) {
        case ShardKind::kDataParallel:
            return "data_parallel, replicated on every rank";
        case ShardKind::kTable:
            return str_cat("table on rank ", p.shards.at(0).rank);
        case ShardKind::kRow:
        case ShardKind::kColumn: {
            const bool columns = p.kind == ShardKind::kColumn;
            const auto [lo, hi] = shard_extent(p, columns);
            const char* unit = columns ? " columns" : " rows";
            std::string s = str_cat(shard_kind_name(p.kind), " over ", n,
                                    n == 1 ? " rank (" : " ranks (", hi, unit, " a rank");
            if (lo != hi) s += str_cat(", some ", lo);
            return s + ")";
        }
        case ShardKind::kAuto:
            break;
    }
    ZT_ASSERT(false, "auto left in a plan");
    return "";
}

}  // namespace

const char* shard_kind_name(ShardKind k) {
    switch (k) {
        case ShardKind::kAuto:
            return "auto";
        case ShardKind::kDataParallel:
            return "data_parallel";
        case ShardKind::kTable:
            return "table";
        case ShardKind::kRow:
            return "row";
        case ShardKind::kColumn:
            return "column";
    }
    return "?";
}

ShardKind parse_shard_kind(const std::string& name, const std::string& key) {
    for (ShardKind k : kAllKinds)
        if (name == shard_kind_name(k)) return k;
    ZT_FAIL(key, ": unknown embedding sharding \"", name,
            "\"; expected one of auto, data_parallel, table, row, column");
}

const TableShard* EmbeddingPlan::shard_on(size_t table, int rank) const {
    for (const TableShard& s : placement.at(table).shards)
        if (s.rank == rank) return &s;
    return nullptr;
}

std::vector<std::string> EmbeddingPlan::describe() const {
    std::vector<std::string> lines;
    for (size_t t = 0; t < tables.size(); ++t)
        lines.push_back(str_cat(tables[t].name, " (", tables[t].rows, " x ", tables[t].dim,
                                "): ", placement_str(placement[t]), ", ", bytes_str(table_bytes[t]),
                                " in all"));
    for (size_t r = 0; r < rank_bytes.size(); ++r)
        lines.push_back(str_cat(
            "rank ", r, ": ", bytes_str(rank_bytes[r]), " of tables",
            r < rank_resident_bytes.size() && rank_resident_bytes[r] != rank_bytes[r]
                ? str_cat(" (", bytes_str(rank_resident_bytes[r]), " in memory, the rest tiered)")
                : std::string(),
            ", at most ", bytes_str(rank_alltoall_bytes[r]), " sent by all-to-all a step"));
    lines.push_back(str_cat("all ranks: ", bytes_str(total_bytes), " of tables, at most ",
                            bytes_str(alltoall_bytes_per_step), " sent by all-to-all a step"));
    return lines;
}

nlohmann::json EmbeddingPlan::to_json() const {
    nlohmann::json jt = nlohmann::json::array();
    for (size_t t = 0; t < tables.size(); ++t) {
        nlohmann::json shards = nlohmann::json::array();
        for (const TableShard& s : placement[t].shards)
            shards.push_back({{"rank", s.rank},
                              {"row_begin", s.row_begin},
                              {"row_end", s.row_end},
                              {"col_begin", s.col_begin},
                              {"col_end", s.col_end}});
        jt.push_back({{"name", tables[t].name},
                      {"rows", tables[t].rows},
                      {"dim", tables[t].dim},
                      {"ids_per_sample", tables[t].ids_per_sample},
                      {"kind", shard_kind_name(placement[t].kind)},
                      {"shards", std::move(shards)},
                      {"bytes", table_bytes[t]}});
    }
    return {{"ranks", rank_bytes.size()},
            {"tables", std::move(jt)},
            {"rank_bytes", rank_bytes},
            {"rank_resident_bytes", rank_resident_bytes},
            {"rank_alltoall_bytes", rank_alltoall_bytes},
            {"total_bytes", total_bytes},
            {"alltoall_bytes_per_step", alltoall_bytes_per_step}};
}

}  // namespace zt
