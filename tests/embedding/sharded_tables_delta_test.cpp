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

void check_rank(const ClickDataset& ds, const EmbeddingTierOptions& tier, Communicator& comm) {
    set_num_threads(1);
    MemoryPool pool;
    EngineOptions eo;
    eo.grad_accum = 1;
    eo.lr = 0.3;
    eo.seed = 5;
    eo.optimizer = std::make_unique<Sgd>(SgdOptions{});
    eo.comm = &comm;
    eo.micro_batch = kMicro;
    Engine engine(pool, std::make_unique<Dlrm>(model_options(tier)), std::move(eo));
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

}  // namespace
}  // namespace zt
