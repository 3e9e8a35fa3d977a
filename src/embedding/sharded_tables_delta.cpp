// ShardedTables: incremental checkpoint blocks (checkpoint.incremental, Note [Incremental
// checkpoints] in runtime/checkpoint_chain.cpp): which rows of each local shard step() updated
// since the last checkpoint, the delta block of those rows, and applying one to a whole block.
// Invariant: the marked rows are a superset of the rows whose weights or state changed. Leaves
// out: the chain itself (runtime/checkpoint_chain.cpp) and whole blocks (sharded_tables_io.cpp).
#include <algorithm>
#include <cstring>

#include "embedding/sharded_tables_detail.h"
#include "util/error.h"

// Note [Sharded table increments]
// A static table's rows change only in step(), and only the rows of merged_rows (the ascending
// shard-local rows the step's lookups used, whatever the tier: a tiered shard's rows are updated
// in its cache, and write-backs and evictions move bytes without changing values). With tracking
// on, step() sets those rows' bits in the shard's bitmap (1 bit per row: 2.4 MiB for 20 million
// rows); saved() clears every bitmap when a checkpoint is staged. A delta block has the writer's
// range (the same rows and columns as its whole block from blocks(), so the chain's reader pairs
// them and overlaps() routes them like whole ones) and holds, for the n marked rows in ascending
// order, their weights (n x cols), their optimizer state (n x state_per_row(cols)) and, in aux,
// kDeltaTag followed by their shard-local indices. Applying one overwrites those rows of the
// whole block; a row the step did not change has the same value in the base, so a superset of
// the changed rows is harmless, and a changed row left out is not (the unit test checks both).
// Deltas are read from the shard as it is (read_rows: the tier's cache or store), in runs of
// adjacent rows. Loading a block marks nothing: resume builds the tables from a checkpoint, and
// the checkpointer starts tracking after it.

namespace zt {

namespace {

constexpr uint64_t kDeltaTag = 0x7a74'7374'6465'6c74;  // "ztstdelt": aux[0] of a delta block

}  // namespace

void ShardedTables::track_changes(bool on) {
    track_ = on;
    for (auto& s : shards_) {
        if (on)
            s->changed.assign(static_cast<size_t>((s->storage.rows + 63) / 64), 0);
        else
            s->changed = {};
    }
}

void ShardedTables::mark_changed(Shard& s) {
    if (!track_) return;
    for (const int64_t r : s.merged_rows)
        s.changed[static_cast<size_t>(r >> 6)] |= uint64_t{1} << (r & 63);
}

void ShardedTables::saved() {
    for (auto& s : shards_) std::fill(s->changed.begin(), s->changed.end(), 0);
}

bool ShardedTables::is_delta(size_t, const SparseBlock& b) const {
    return !b.aux.empty() && b.aux[0] == kDeltaTag;
}

// One delta block per piece of the shard (Note [Tiered shards in pieces]: one piece, the whole
// shard, without a tier), its rows' indices local to the piece.
std::vector<SparseBlock> ShardedTables::delta_blocks(size_t i) const {
    const int idx = shard_of_table_[static_cast<size_t>(sharded_.at(i))];
    if (idx < 0) return {};
    const Shard& s = *shards_[static_cast<size_t>(idx)];
    ZT_ASSERT(track_, "ShardedTables::delta_blocks without track_changes(true)");
    std::vector<uint64_t> marked;  // shard-local, ascending
    for (size_t w = 0; w < s.changed.size(); ++w)
        for (uint64_t bits = s.changed[w]; bits != 0; bits &= bits - 1)
            marked.push_back(w * 64 + static_cast<uint64_t>(__builtin_ctzll(bits)));
    const int64_t cols = s.storage.cols, sc = optimizer_.state_per_row(cols);
    const int64_t per = piece_rows(s);
    std::vector<SparseBlock> out;
    size_t at = 0;
    for (int64_t p0 = 0; p0 < std::max<int64_t>(s.storage.rows, 1); p0 += per) {
        const int64_t p1 = std::min(p0 + per, s.storage.rows);
        SparseBlock b;
        b.row_begin = s.range.row_begin + p0;
        b.row_end = s.range.row_begin + std::max(p1, p0);
        b.col_begin = s.range.col_begin;
        b.col_end = s.range.col_end;
        b.aux.push_back(kDeltaTag);
        for (; at < marked.size() && static_cast<int64_t>(marked[at]) < p1; ++at)
            b.aux.push_back(marked[at] - static_cast<uint64_t>(p0));
        const auto n = static_cast<int64_t>(b.aux.size()) - 1;
        b.weights.resize(static_cast<size_t>(n * cols));
        b.state.resize(static_cast<size_t>(n * sc));
        for (int64_t k = 0; k < n;) {  // one read per run of adjacent rows
            int64_t e = k + 1;
            while (e < n && b.aux[static_cast<size_t>(e + 1)] == b.aux[static_cast<size_t>(e)] + 1)
                ++e;
            read_rows(s, p0 + static_cast<int64_t>(b.aux[static_cast<size_t>(k + 1)]), e - k,
                      b.weights.data() + k * cols, sc > 0 ? b.state.data() + k * sc : nullptr);
            k = e;
        }
        out.push_back(std::move(b));
    }
    return out;
}

void ShardedTables::apply_delta(size_t i, SparseBlock& base, const SparseBlock& delta) const {
    const std::string& name = plan_.tables[static_cast<size_t>(sharded_.at(i))].name;
    ZT_CHECK(base.row_begin == delta.row_begin && base.row_end == delta.row_end &&
                 base.col_begin == delta.col_begin && base.col_end == delta.col_end,
             "checkpoint: ", name, ": an incremental block of rows [", delta.row_begin, ", ",
             delta.row_end, ") x cols [", delta.col_begin, ", ", delta.col_end,
             ") applied to the block of rows [", base.row_begin, ", ", base.row_end, ") x cols [",
             base.col_begin, ", ", base.col_end, ")");
    ZT_CHECK(is_delta(i, delta) && !is_delta(i, base), "checkpoint: ", name,
             ": an incremental block applied to another incremental block");
    const int64_t rows = base.row_end - base.row_begin, cols = base.col_end - base.col_begin;
    const int64_t sc = optimizer_.state_per_row(cols);
    const auto n = static_cast<int64_t>(delta.aux.size()) - 1;
    ZT_CHECK(static_cast<int64_t>(base.weights.size()) == rows * cols &&
                 static_cast<int64_t>(base.state.size()) == rows * sc,
             "checkpoint: ", name, ": a whole block with ", base.weights.size(), " weights and ",
             base.state.size(), " state values for ", rows, " x ", cols, " rows");
    ZT_CHECK(static_cast<int64_t>(delta.weights.size()) == n * cols &&
                 static_cast<int64_t>(delta.state.size()) == n * sc,
             "checkpoint: ", name, ": an incremental block with ", n, " rows holds ",
             delta.weights.size(), " weights and ", delta.state.size(), " state values, expected ",
             n * cols, " and ", n * sc);
    for (int64_t k = 0; k < n; ++k) {
        const uint64_t r = delta.aux[static_cast<size_t>(k + 1)];
        ZT_CHECK(
            r < static_cast<uint64_t>(rows) && (k == 0 || r > delta.aux[static_cast<size_t>(k)]),
            "checkpoint: ", name, ": an incremental block names row ", r,
            " out of order or outside its ", rows, " rows");
        std::memcpy(base.weights.data() + static_cast<int64_t>(r) * cols,
                    delta.weights.data() + k * cols, static_cast<size_t>(cols) * sizeof(float));
        if (sc > 0)
            std::memcpy(base.state.data() + static_cast<int64_t>(r) * sc,
                        delta.state.data() + k * sc, static_cast<size_t>(sc) * sizeof(float));
    }
}

}  // namespace zt
