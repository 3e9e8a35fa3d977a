// Stale updates of dynamic tables (Note [Stale dynamic updates] in embedding/dynamic_stale.cpp):
// with staleness 2 a step's update lands two steps later, keyed by id. A row that stays takes
// exactly its held update; a row evicted inside the window (unseen_steps 1) loses it, even when
// its id is admitted again before the landing (a new row, which the held step never read); a
// held update of an unadmitted id goes to the default row; apply_held lands everything left, and
// the metrics count the dropped rows. On two ranks (threads) the rows take the one-rank bits.
#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <vector>

#include "comm/local/local_comm.h"
#include "embedding/dynamic_tables.h"

namespace zt {
namespace {

constexpr int64_t kDim = 2;

DynamicTableOptions stale_table() {
    DynamicTableOptions o;
    o.name = "emb_l.0.weight";
    o.dim = kDim;
    o.evict_unseen_steps = 1;  // a row not sighted in a step leaves at its end
    o.unadmitted = UnadmittedRow::kDefaultRow;
    o.init = ParamInit::uniform(0.5f);
    return o;
}

// One micro-batch's lookup and backward: a bag per id (sum pooling, weight 1), so the gradient
// of id's row is the bag's coefficients.
void micro_batch(DynamicTables& t, const std::vector<int64_t>& ids,
                 const std::map<int64_t, std::vector<float>>& coef) {
    MemoryPool pool;
    ClickBatch b;
    b.B = static_cast<int64_t>(ids.size());
    std::vector<int64_t> offsets;
    for (size_t k = 0; k <= ids.size(); ++k) offsets.push_back(static_cast<int64_t>(k));
    b.ids = {ids};
    b.offsets = {offsets};
    b.weights = {{}};
    Tape tape(pool);
    Var out = t.lookup(tape, b, std::vector<ops::BagPooling>{ops::BagPooling::kSum})[0];
    Tensor g = Tensor::empty(pool, out->value.shape(), DType::kF32, MemCategory::kActivations);
    for (size_t k = 0; k < ids.size(); ++k)
        for (int64_t c = 0; c < kDim; ++c)
            g.data<float>()[static_cast<int64_t>(k) * kDim + c] =
                coef.at(ids[k])[static_cast<size_t>(c)];
    tape.backward_from(std::move(out), g);
}

// A step of one micro-batch, then its update (SGD at rate 1 unless the tables have a rate).
void train_step(DynamicTables& t, const std::vector<int64_t>& ids,
                const std::map<int64_t, std::vector<float>>& coef, int64_t update) {
    micro_batch(t, ids, coef);
    t.finish_grads();
    t.step(1.0, 1.0, update);
}

std::vector<float> row_of(DynamicTable& t, uint64_t id) {
    const int64_t s = t.find(id);
    if (s < 0) return {};
    return std::vector<float>(t.row(s), t.row(s) + kDim);
}

// w + (-1) * g per element: SGD at rate 1, as the sparse optimizer computes it.
std::vector<float> sgd(std::vector<float> w, const std::vector<float>& g) {
    for (size_t c = 0; c < w.size(); ++c) w[c] = w[c] + (-1.0f) * g[c];
    return w;
}

TEST(DynamicStale, AnEvictedRowDropsItsHeldUpdateAndAStayingRowTakesItsOwn) {
    constexpr int64_t kA = 11, kB = 12;
    DynamicTablesOptions to;  // sparse SGD
    to.staleness = 2;
    MemoryPool pool;
    DynamicTables t(pool, {stale_table()}, {0}, nullptr, to);
    DynamicTable& table = t.table(0);
    const std::map<int64_t, std::vector<float>> g0 = {{kA, {0.5f, -0.25f}}, {kB, {1.0f, 2.0f}}},
                                                g1 = {{kA, {0.125f, 0.75f}}},
                                                g2 = {{kA, {-1.5f, 0.5f}}, {kB, {0.25f, -2.0f}}};
    // Step 0 sights A and B (admitted, min_count 1); its update lands at the end of step 2.
    train_step(t, {kA, kB}, g0, 1);
    const std::vector<float> a0 = row_of(table, kA), b0 = row_of(table, kB);
    ASSERT_EQ(a0.size(), 2u);
    ASSERT_EQ(b0.size(), 2u);
    const std::vector<float> def0(table.default_row(), table.default_row() + kDim);
    // Step 1 sights A only: B leaves at its end (unseen for one step) with its held update.
    train_step(t, {kA}, g1, 2);
    EXPECT_EQ(row_of(table, kA), a0);  // nothing landed yet
    EXPECT_TRUE(row_of(table, kB).empty());
    EXPECT_EQ(t.step_counters()["stale_dropped"], 0);
    // Step 2 sights both again: B is a new row from its initial value. Step 0's update lands:
    // A takes g0, B's part is dropped (the new row never read step 0's).
    train_step(t, {kA, kB}, g2, 3);
    EXPECT_EQ(row_of(table, kA), sgd(a0, g0.at(kA)));
    EXPECT_EQ(row_of(table, kB), b0);
    EXPECT_EQ(t.step_counters()["stale_dropped"], 1);
    std::vector<float> def(table.default_row(), table.default_row() + kDim);
    EXPECT_EQ(def, def0);  // every id had a row: nothing for the default row
    // apply_held lands steps 1 and 2, oldest first, each as its own update.
    t.apply_held(1.0, 1.0, 3);
    EXPECT_EQ(row_of(table, kA), sgd(sgd(sgd(a0, g0.at(kA)), g1.at(kA)), g2.at(kA)));
    EXPECT_EQ(row_of(table, kB), sgd(b0, g2.at(kB)));
    EXPECT_EQ(table.step(), 3);  // landing is not a table step: nothing more left
    EXPECT_EQ(table.rows(), 2);
}

TEST(DynamicStale, AnUnadmittedIdsHeldGradientGoesToTheDefaultRow) {
    constexpr int64_t kC = 7;
    DynamicTableOptions o = stale_table();
    o.min_count = 2;  // C is pending at step 0, a row from step 1
    o.evict_unseen_steps = 0;
    DynamicTablesOptions to;
    to.staleness = 1;
    MemoryPool pool;
    DynamicTables t(pool, {o}, {0}, nullptr, to);
    DynamicTable& table = t.table(0);
    const std::map<int64_t, std::vector<float>> g0 = {{kC, {0.5f, 0.25f}}},
                                                g1 = {{kC, {-0.75f, 1.0f}}};
    const std::vector<float> def0(table.default_row(), table.default_row() + kDim);
    train_step(t, {kC}, g0, 1);  // C reads the default row
    train_step(t, {kC}, g1, 2);  // C is admitted; step 0's update lands on the default row
    const std::vector<float> c1 = row_of(table, kC);
    ASSERT_EQ(c1.size(), 2u);
    EXPECT_EQ(std::vector<float>(table.default_row(), table.default_row() + kDim),
              sgd(def0, g0.at(kC)));
    t.apply_held(1.0, 1.0, 2);
    EXPECT_EQ(row_of(table, kC), sgd(c1, g1.at(kC)));
}

// Two ranks (threads) against one process running both ranks' micro-batches in rank order (Note
// [Dynamic exchange]): each id's row has one owner, the held exchanges stay in flight on the
// tables' own channel and land in the one-process order, so every row takes its bits.
TEST(DynamicStale, TwoRanksTakeTheOneProcessBits) {
    DynamicTableOptions o = stale_table();
    o.evict_unseen_steps = 2;  // no max_rows: its cap is per rank
    DynamicTablesOptions to;
    to.optimizer.kind = SparseOptimKind::kAdagrad;
    to.staleness = 3;
    // Step k's micro-batch of rank r: 8 ids; one rank runs both ranks' bags in rank order.
    auto ids_of = [](int step, int rank) {
        std::vector<int64_t> ids;
        for (int k = 0; k < 8; ++k) ids.push_back((k * 5 + step * 3 + rank * 7) % 23);
        return ids;
    };
    auto coef_of = [](const std::vector<int64_t>& ids, int step) {
        std::map<int64_t, std::vector<float>> c;
        for (int64_t id : ids)
            c[id] = {0.01f * static_cast<float>(id % 5) - 0.02f, 0.03f * static_cast<float>(step)};
        return c;
    };
    auto rows = [](DynamicTable& t) {
        std::map<uint64_t, std::vector<float>> m;
        for (int64_t s = 0; s < t.rows(); ++s)
            m[t.id_of(s)] = std::vector<float>(t.row(s), t.row(s) + kDim);
        return m;
    };
    constexpr int kSteps = 9;
    std::map<uint64_t, std::vector<float>> one;
    {
        MemoryPool pool;
        DynamicTables t(pool, {o}, {0}, nullptr, to);
        for (int step = 0; step < kSteps; ++step) {
            std::vector<int64_t> all = ids_of(step, 0), more = ids_of(step, 1);
            all.insert(all.end(), more.begin(), more.end());
            micro_batch(t, ids_of(step, 0), coef_of(all, step));
            micro_batch(t, ids_of(step, 1), coef_of(all, step));
            t.finish_grads();
            t.step(0.1, 0.1, step + 1);
        }
        EXPECT_GT(t.step_counters()["dynamic_tables"]["emb_l.0.weight"]["evictions"], 0);
        t.apply_held(0.1, 0.1, kSteps);
        one = rows(t.table(0));
    }
    std::map<uint64_t, std::vector<float>> two;
    std::mutex mu;
    run_local_ranks(2, [&](Communicator& comm) {
        MemoryPool pool;
        DynamicTables t(pool, {o}, {0}, &comm, to);
        for (int step = 0; step < kSteps; ++step) {
            const std::vector<int64_t> ids = ids_of(step, comm.rank());
            std::vector<int64_t> all = ids_of(step, 0), more = ids_of(step, 1);
            all.insert(all.end(), more.begin(), more.end());
            micro_batch(t, ids, coef_of(all, step));
            t.finish_grads();
            t.step(0.1, 0.1, step + 1);
        }
        t.apply_held(0.1, 0.1, kSteps);
        std::lock_guard<std::mutex> lock(mu);
        for (auto& [id, r] : rows(t.table(0))) two[id] = r;
    });
    ASSERT_GT(one.size(), 10u);
    EXPECT_EQ(two, one);
}

}  // namespace
}  // namespace zt
