// ShardedTables: whole tables for export (gather), loading a whole table (init_from), and the
// per-rank blocks checkpoints write and read on any plan (load_block copies the overlap).
#include <algorithm>
#include <cstring>

#include "comm/communicator.h"
#include "embedding/sharded_tables_detail.h"
#include "util/error.h"

namespace zt {

namespace {

constexpr int kGatherTag = 0x5e00;  // + table index: tags of the export gather

// Rows [r0, r1) x cols [c0, c1) of a block laid out (rows, width) from column `base`.
struct Window {
    int64_t r0, r1, c0, c1;
    bool empty() const { return r0 >= r1 || c0 >= c1; }
};

Window overlap(const TableShard& a, const SparseBlock& b) {
    return {std::max(a.row_begin, b.row_begin), std::min(a.row_end, b.row_end),
            std::max(a.col_begin, b.col_begin), std::min(a.col_end, b.col_end)};
}

}  // namespace

void ShardedTables::read_rows(const Shard& s, int64_t r0, int64_t n, float* w, float* state) const {
    if (s.tier) {
        s.tier->read_range(r0, n, w, state);
        return;
    }
    for (int64_t r = 0; r < n; ++r) s.storage.read_row(r0 + r, w + r * s.storage.cols);
    if (state && s.state.defined()) {
        const int64_t sc = s.state.size(1);
        std::memcpy(state, s.state.data<float>() + r0 * sc, static_cast<size_t>(n * sc) * 4);
    }
}

void ShardedTables::write_rows(Shard& s, int64_t r0, int64_t n, const float* w,
                               const float* state) {
    if (s.tier) {
        s.tier->write_range(r0, n, w, state);
        return;
    }
    for (int64_t r = 0; r < n; ++r) s.storage.write_row(r0 + r, w + r * s.storage.cols);
    if (state && s.state.defined()) {
        const int64_t sc = s.state.size(1);
        std::memcpy(s.state.data<float>() + r0 * sc, state, static_cast<size_t>(n * sc) * 4);
    }
}

std::vector<float> ShardedTables::gather(size_t i, int root) {
    const EmbeddingTableSpec& spec = plan_.tables[static_cast<size_t>(sharded_.at(i))];
    std::vector<float> whole;
    if (rank_ == root) whole.assign(static_cast<size_t>(spec.rows * spec.dim), 0.0f);
    gather_rows(i, 0, spec.rows, root, whole.data());
    return whole;
}

// Each shard's rows of [r0, r0 + n) go from their owner to root, in the plan's shard order.
void ShardedTables::gather_rows(size_t i, int64_t r0, int64_t n, int root, float* out) {
    const int t = sharded_.at(i);
    const int64_t dim = plan_.tables[static_cast<size_t>(t)].dim;
    const Shard* mine = local_shard(t);
    std::vector<float> block;
    for (const TableShard& sh : plan_.placement[static_cast<size_t>(t)].shards) {
        const int64_t a = std::max(r0, sh.row_begin), b = std::min(r0 + n, sh.row_end);
        if (a >= b || (sh.rank != rank_ && rank_ != root)) continue;
        const int64_t rows = b - a, cols = sh.col_end - sh.col_begin;
        block.resize(static_cast<size_t>(rows * cols));
        if (sh.rank == rank_) {
            ZT_ASSERT(mine && mine->range.row_begin == sh.row_begin, "gather_rows: shard of ",
                      plan_.tables[static_cast<size_t>(t)].name, " not held here");
            read_rows(*mine, a - sh.row_begin, rows, block.data(), nullptr);
            if (rank_ != root) {
                comm_->send(block.data(), rows * cols, CommType::kF32, root, kGatherTag + t)
                    ->wait();
                continue;
            }
        } else {
            comm_->recv(block.data(), rows * cols, CommType::kF32, sh.rank, kGatherTag + t)->wait();
        }
        for (int64_t r = 0; r < rows; ++r)
            std::memcpy(out + (a - r0 + r) * dim + sh.col_begin, block.data() + r * cols,
                        static_cast<size_t>(cols) * sizeof(float));
    }
}

// Note [Tiered shards in pieces]
// A tiered shard may be larger than the machine's memory (its rows live in a swap file), so its
// whole block is never copied at once: checkpoints write it as pieces of consecutive rows of at
// most tier.piece_bytes of weights and state (pieces, read_piece: read from the tier as it is,
// cache included), its increments are split by the same pieces (sharded_tables_delta.cpp, so that
// each pairs with its piece in a chain), and exports gather it in runs of rows (gather_rows). A
// resume loads whatever blocks were written, piece by piece (load_block copies each overlap).
int64_t ShardedTables::piece_rows(const Shard& s) const {
    if (!s.tier) return std::max<int64_t>(s.storage.rows, 1);
    const int64_t cols = s.storage.cols;
    const int64_t record = (cols + optimizer_.state_per_row(cols)) * 4;
    return std::max<int64_t>(options_.tier.piece_bytes / record, 1);
}

std::vector<SparseBlock> ShardedTables::pieces(size_t i) const {
    const int idx = shard_of_table_[static_cast<size_t>(sharded_.at(i))];
    if (idx < 0) return {};
    const Shard& s = *shards_[static_cast<size_t>(idx)];
    std::vector<SparseBlock> out;
    const int64_t per = piece_rows(s);
    for (int64_t r = s.range.row_begin; r < s.range.row_end; r += per) {
        SparseBlock b;
        b.row_begin = r;
        b.row_end = std::min(r + per, s.range.row_end);
        b.col_begin = s.range.col_begin;
        b.col_end = s.range.col_end;
        out.push_back(std::move(b));
    }
    return out;
}

SparseBlock ShardedTables::read_piece(size_t i, const SparseBlock& piece) const {
    const int idx = shard_of_table_[static_cast<size_t>(sharded_.at(i))];
    ZT_ASSERT(idx >= 0, "read_piece: no shard of tensor ", i, " here");
    const Shard& s = *shards_[static_cast<size_t>(idx)];
    ZT_ASSERT(piece.row_begin >= s.range.row_begin && piece.row_end <= s.range.row_end &&
                  piece.col_begin == s.range.col_begin && piece.col_end == s.range.col_end,
              "read_piece: a piece outside the shard");
    SparseBlock b = piece;
    const int64_t rows = piece.row_end - piece.row_begin, cols = s.storage.cols;
    b.weights.resize(static_cast<size_t>(rows * cols));
    b.state.resize(static_cast<size_t>(rows * optimizer_.state_per_row(cols)));
    read_rows(s, piece.row_begin - s.range.row_begin, rows, b.weights.data(),
              b.state.empty() ? nullptr : b.state.data());
    return b;
}

void ShardedTables::load(size_t i, const float* whole) {
    const int t = sharded_.at(i);
    Shard* s = local_shard(t);
    if (!s) return;
    const int64_t dim = plan_.tables[static_cast<size_t>(t)].dim, cols = s->storage.cols;
    std::vector<float> w(static_cast<size_t>(s->storage.rows * cols));
    for (int64_t r = 0; r < s->storage.rows; ++r)
        std::memcpy(w.data() + r * cols,
                    whole + (s->range.row_begin + r) * dim + s->range.col_begin,
                    static_cast<size_t>(cols) * sizeof(float));
    write_rows(*s, 0, s->storage.rows, w.data(), nullptr);  // state untouched
}

// Block state layout: (rows, state_per_row(block cols)); per-element kinds keep `planes` planes of
// the block's columns side by side (Adam: m then v), row-wise Adagrad one value per row.
std::vector<SparseBlock> ShardedTables::blocks(size_t i) const {
    const int t = sharded_.at(i);
    const int idx = shard_of_table_[static_cast<size_t>(t)];
    if (idx < 0) return {};
    const Shard& s = *shards_[static_cast<size_t>(idx)];
    SparseBlock b;
    b.row_begin = s.range.row_begin;
    b.row_end = s.range.row_end;
    b.col_begin = s.range.col_begin;
    b.col_end = s.range.col_end;
    const int64_t rows = s.storage.rows, cols = s.storage.cols;
    b.weights.resize(static_cast<size_t>(rows * cols));
    b.state.resize(static_cast<size_t>(rows * optimizer_.state_per_row(cols)));
    read_rows(s, 0, rows, b.weights.data(), b.state.empty() ? nullptr : b.state.data());
    return {b};
}

bool ShardedTables::overlaps(size_t i, const SparseBlock& b) const {
    const int idx = shard_of_table_[static_cast<size_t>(sharded_.at(i))];
    return idx >= 0 && !overlap(shards_[static_cast<size_t>(idx)]->range, b).empty();
}

void ShardedTables::load_block(size_t i, const SparseBlock& b) {
    const int t = sharded_.at(i);
    Shard* s = local_shard(t);
    if (!s) return;
    const Window w = overlap(s->range, b);
    if (w.empty()) return;
    const int64_t bcols = b.col_end - b.col_begin, cols = s->storage.cols;
    ZT_CHECK(static_cast<int64_t>(b.weights.size()) == (b.row_end - b.row_begin) * bcols,
             "embedding: a checkpoint block of ", plan_.tables[static_cast<size_t>(t)].name,
             " holds ", b.weights.size(), " weights for its ", b.row_end - b.row_begin, " x ",
             bcols, " range");
    const int64_t bstate = optimizer_.state_per_row(bcols);
    const int64_t sstate = optimizer_.state_per_row(cols);
    const bool has_state = sstate > 0 && !b.state.empty();
    ZT_CHECK(
        !has_state || static_cast<int64_t>(b.state.size()) == (b.row_end - b.row_begin) * bstate,
        "embedding: a checkpoint block of ", plan_.tables[static_cast<size_t>(t)].name,
        " holds optimizer state of another kind (", b.state.size(), " values for ",
        b.row_end - b.row_begin, " rows); resume with the optimizer it was written with");
    const bool per_row = sstate == 1 && cols > 1;  // row-wise Adagrad
    const int64_t planes = per_row || cols == 0 ? 0 : sstate / cols;
    // The window's rows as they are, patched with the block's columns, written back.
    const int64_t n = w.r1 - w.r0, first = w.r0 - s->range.row_begin;
    std::vector<float> rows(static_cast<size_t>(n * cols)), state(static_cast<size_t>(n * sstate));
    read_rows(*s, first, n, rows.data(), has_state ? state.data() : nullptr);
    for (int64_t r = w.r0; r < w.r1; ++r) {
        const int64_t sr = r - w.r0, br = r - b.row_begin;
        for (int64_t c = w.c0; c < w.c1; ++c)
            rows[static_cast<size_t>(sr * cols + c - s->range.col_begin)] =
                b.weights[static_cast<size_t>(br * bcols + (c - b.col_begin))];
        if (!has_state) continue;
        float* dst = state.data() + sr * sstate;
        const float* src = b.state.data() + br * bstate;
        if (per_row || sstate == 1) {
            dst[0] = src[0];
            continue;
        }
        for (int64_t p = 0; p < planes; ++p)
            for (int64_t c = w.c0; c < w.c1; ++c)
                dst[p * cols + (c - s->range.col_begin)] = src[p * bcols + (c - b.col_begin)];
    }
    write_rows(*s, first, n, rows.data(), has_state ? state.data() : nullptr);
}

}  // namespace zt
