// Incremental checkpoint blocks of sharded static tables (Note [Sharded table increments]): after
// a few steps of DLRM on 2 ranks (row-, table- and column-wise tables, Adam state, in memory and
// tiered), the delta of each rank's shard applied to its whole block of the last mark gives the
// whole block now, bit for bit; the delta holds few of the rows; leaving out a changed row does
// not give it; a mark empties the next delta; a delta on another writer's block is refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "comm/local/local_comm.h"
#include "data/click/click_dataset.h"
#include "data/click/synth_ctr.h"
#include "models/click_steps.h"
#include "models/dlrm/dlrm.h"
#include "optim/sgd.h"
#include "runtime/engine.h"
#include "tensor/threads.h"
#include "util/error.h"

namespace zt {
namespace {

namespace fs = std::filesystem;

const std::vector<int64_t> kRows = {3001, 2003, 1001};
constexpr int64_t kDim = 6, kMicro = 8, kRanks = 2;

DlrmOptions model_options(const EmbeddingTierOptions& tier) {
    DlrmOptions o;
    o.dense_features = 13;
    for (int64_t r : kRows) o.tables.push_back({r, kDim, ops::BagPooling::kSum});
    o.bottom_mlp = {16, kDim};
    o.top_mlp = {16, 1};
    o.embedding.enabled = true;
    o.embedding.sharding = {ShardKind::kRow, ShardKind::kTable, ShardKind::kColumn};
    o.embedding.optimizer.kind = SparseOptimKind::kAdam;
    o.embedding.tier = tier;
    return o;
}

// A copy of b without its k-th row (of a delta block).
SparseBlock without_row(const SparseBlock& b, size_t k, int64_t cols, int64_t sc) {
    SparseBlock out = b;
    out.aux.erase(out.aux.begin() + static_cast<std::ptrdiff_t>(k + 1));
    out.weights.erase(out.weights.begin() + static_cast<std::ptrdiff_t>(k) * cols,
                      out.weights.begin() + static_cast<std::ptrdiff_t>(k + 1) * cols);
    out.state.erase(out.state.begin() + static_cast<std::ptrdiff_t>(k) * sc,
                    out.state.begin() + static_cast<std::ptrdiff_t>(k + 1) * sc);
    return out;
}

// SGD for the dense part, the tables' Adam (model_options), one thread, on comm's ranks.
std::unique_ptr<Engine> make_engine(MemoryPool& pool, const EmbeddingTierOptions& tier,
                                    Communicator& comm) {
    set_num_threads(1);
    EngineOptions eo;
    eo.grad_accum = 1;
    eo.lr = 0.3;
    eo.seed = 5;
    eo.optimizer = std::make_unique<Sgd>(SgdOptions{});
    eo.comm = &comm;
    eo.micro_batch = kMicro;
    return std::make_unique<Engine>(pool, std::make_unique<Dlrm>(model_options(tier)),
                                    std::move(eo));
}

void check_rank(const ClickDataset& ds, const EmbeddingTierOptions& tier, Communicator& comm) {
    MemoryPool pool;
    const std::unique_ptr<Engine> e = make_engine(pool, tier, comm);
    Engine& engine = *e;
    SparseParams& sp = *engine.sparse_params();
    ASSERT_EQ(sp.names().size(), kRows.size());
    ClickBatchBuffers buf;
    int64_t step = 0;
    for (; step < 2; ++step) click_step(engine, ds, buf, step, 1, kMicro, comm.rank(), kRanks);
    sp.track_changes(true);
    std::vector<std::vector<SparseBlock>> base(kRows.size());
    for (size_t i = 0; i < kRows.size(); ++i) base[i] = sp.blocks(i);
    sp.saved();
    for (; step < 5; ++step) click_step(engine, ds, buf, step, 1, kMicro, comm.rank(), kRanks);
    for (size_t i = 0; i < kRows.size(); ++i) {
        SCOPED_TRACE(str_cat("rank ", comm.rank(), " ", sp.names()[i]));
        const std::vector<SparseBlock> now = sp.blocks(i), delta = sp.delta_blocks(i);
        ASSERT_EQ(delta.size(), now.size());
        if (now.empty()) continue;  // table-wise: the other rank holds it
        const SparseBlock& d = delta[0];
        ASSERT_TRUE(sp.is_delta(i, d));
        ASSERT_FALSE(sp.is_delta(i, base[i][0]));
        const int64_t rows = now[0].row_end - now[0].row_begin;
        const int64_t cols = now[0].col_end - now[0].col_begin;
        const int64_t sc = static_cast<int64_t>(now[0].state.size()) / rows;
        const auto n = static_cast<int64_t>(d.aux.size()) - 1;
        // 3 steps of 8 samples per rank: at most 48 rows of a shard change.
        EXPECT_GT(n, 0);
        EXPECT_LE(n, 3 * kMicro * kRanks);
        EXPECT_LT(n * 10, rows);
        SparseBlock applied = base[i][0];
        sp.apply_delta(i, applied, d);
        EXPECT_TRUE(applied.weights == now[0].weights);
        EXPECT_TRUE(applied.state == now[0].state);
        // A changed row left out of the delta: the result is not the state now.
        size_t changed = d.aux.size();
        for (size_t k = 0; k < static_cast<size_t>(n); ++k) {
            const auto r = static_cast<int64_t>(d.aux[k + 1]);
            if (!std::equal(base[i][0].weights.begin() + r * cols,
                            base[i][0].weights.begin() + (r + 1) * cols,
                            now[0].weights.begin() + r * cols)) {
                changed = k;
                break;
            }
        }
        ASSERT_LT(changed, static_cast<size_t>(n));
        SparseBlock partial = base[i][0];
        sp.apply_delta(i, partial, without_row(d, changed, cols, sc));
        EXPECT_FALSE(partial.weights == now[0].weights);
        // A delta on another writer's block, or on a delta, is refused.
        SparseBlock other = base[i][0];
        other.row_begin += 1;
        EXPECT_THROW(sp.apply_delta(i, other, d), Error);
        SparseBlock twice = d;
        EXPECT_THROW(sp.apply_delta(i, twice, d), Error);
    }
    // A mark: nothing changed since it.
    sp.saved();
    for (size_t i = 0; i < kRows.size(); ++i)
        for (const SparseBlock& d : sp.delta_blocks(i)) {
            EXPECT_EQ(d.aux.size(), 1u);
            EXPECT_TRUE(d.weights.empty() && d.state.empty());
        }
}

// Note [Tiered shards in pieces]: pieces of a few rows cover the shard's whole block in order
// and read its rows; the delta blocks are one per piece and advance each piece as the whole delta
// advances the whole block; gather_rows gives gather()'s rows.
void check_pieces(const ClickDataset& ds, const EmbeddingTierOptions& tier, Communicator& comm) {
    MemoryPool pool;
    const std::unique_ptr<Engine> e = make_engine(pool, tier, comm);
    Engine& engine = *e;
    SparseParams& sp = *engine.sparse_params();
    ClickBatchBuffers buf;
    int64_t step = 0;
    for (; step < 2; ++step) click_step(engine, ds, buf, step, 1, kMicro, comm.rank(), kRanks);
    sp.track_changes(true);
    std::vector<std::vector<SparseBlock>> base(kRows.size());
    for (size_t i = 0; i < kRows.size(); ++i) {
        ASSERT_TRUE(sp.streamed(i));
        for (const SparseBlock& p : sp.pieces(i)) base[i].push_back(sp.read_piece(i, p));
    }
    sp.saved();
    for (; step < 5; ++step) click_step(engine, ds, buf, step, 1, kMicro, comm.rank(), kRanks);
    for (size_t i = 0; i < kRows.size(); ++i) {
        SCOPED_TRACE(str_cat("rank ", comm.rank(), " ", sp.names()[i]));
        const std::vector<SparseBlock> whole = sp.blocks(i), pieces = sp.pieces(i);
        const std::vector<SparseBlock> delta = sp.delta_blocks(i);
        if (whole.empty()) {
            EXPECT_TRUE(pieces.empty());
            continue;
        }
        const SparseBlock& w = whole[0];
        const int64_t cols = w.col_end - w.col_begin;
        const int64_t sc = static_cast<int64_t>(w.state.size()) / (w.row_end - w.row_begin);
        const int64_t per = tier.piece_bytes / ((cols + sc) * 4);  // 3 rows, 6 of half a row
        ASSERT_GE(per, 3);
        ASSERT_GT(pieces.size(), 100u);
        ASSERT_EQ(delta.size(), pieces.size());
        int64_t next = w.row_begin, changed = 0;
        for (size_t k = 0; k < pieces.size(); ++k) {
            const SparseBlock got = sp.read_piece(i, pieces[k]);
            ASSERT_EQ(got.row_begin, next);
            ASSERT_TRUE(got.row_end - got.row_begin == per ||
                        (k + 1 == pieces.size() && got.row_end - got.row_begin < per));
            next = got.row_end;
            const int64_t at = got.row_begin - w.row_begin, n = got.row_end - got.row_begin;
            ASSERT_TRUE(
                std::equal(got.weights.begin(), got.weights.end(), w.weights.begin() + at * cols) &&
                static_cast<int64_t>(got.weights.size()) == n * cols);
            ASSERT_TRUE(std::equal(got.state.begin(), got.state.end(), w.state.begin() + at * sc));
            ASSERT_EQ(delta[k].row_begin, got.row_begin);
            ASSERT_EQ(delta[k].row_end, got.row_end);
            SparseBlock advanced = base[i][k];
            sp.apply_delta(i, advanced, delta[k]);
            EXPECT_TRUE(advanced.weights == got.weights && advanced.state == got.state) << k;
            changed += static_cast<int64_t>(delta[k].aux.size()) - 1;
        }
        EXPECT_EQ(next, w.row_end);
        EXPECT_GT(changed, 0);
    }
    // gather_rows: a run of rows across shards equals gather()'s.
    for (size_t i = 0; i < kRows.size(); ++i) {
        const std::vector<float> all = sp.gather(i, 0);
        const int64_t r0 = 7, n = kRows[i] - 20;
        std::vector<float> part(static_cast<size_t>(n * kDim), -1.0f);
        sp.gather_rows(i, r0, n, 0, comm.rank() == 0 ? part.data() : nullptr);
        if (comm.rank() == 0) {
            EXPECT_TRUE(std::equal(part.begin(), part.end(), all.begin() + r0 * kDim));
        }
    }
}

class ShardedTablesDelta : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        dir_ = fs::temp_directory_path() / "zt_sharded_tables_delta";
        fs::remove_all(dir_);
        fs::create_directories(dir_);
        SynthCtrOptions so;
        so.records = 1000;
        so.seed = 7;
        so.table_rows = kRows;
        write_synth_ctr(so, (dir_ / "d.ctr").string());
        ClickDatasetOptions dopt;
        dopt.seed = 3;
        ds_ = std::make_unique<ClickDataset>(CtrFile::open((dir_ / "d.ctr").string()), dopt);
    }
    static void TearDownTestSuite() {
        ds_.reset();
        fs::remove_all(dir_);
    }
    static fs::path dir_;
    static std::unique_ptr<ClickDataset> ds_;
};
fs::path ShardedTablesDelta::dir_;
std::unique_ptr<ClickDataset> ShardedTablesDelta::ds_;

TEST_F(ShardedTablesDelta, DeltaOfChangedRowsAdvancesTheWholeBlock) {
    run_local_ranks(kRanks, [&](Communicator& c) { check_rank(*ds_, {}, c); });
}

TEST_F(ShardedTablesDelta, TieredShardsGiveTheSameDeltas) {
    EmbeddingTierOptions tier;
    tier.device = "cpu";
    tier.cache_ratio = 0.05;  // 5% of a shard: every step evicts and writes back
    run_local_ranks(kRanks, [&](Communicator& c) { check_rank(*ds_, tier, c); });
}

TEST_F(ShardedTablesDelta, TieredShardsInPiecesReadAndAdvanceLikeTheWholeBlock) {
    EmbeddingTierOptions tier;
    tier.device = "cpu";
    tier.cache_ratio = 0.05;
    tier.piece_bytes = (kDim + 2 * kDim) * 4 * 3;  // Adam: 3 rows of weights, m and v
    run_local_ranks(kRanks, [&](Communicator& c) { check_pieces(*ds_, tier, c); });
}

}  // namespace
}  // namespace zt
