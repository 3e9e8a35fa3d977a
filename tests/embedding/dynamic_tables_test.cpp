// DynamicTables lookups (embedding/dynamic_tables.h): the gradient a step applies to each row and
// to the default row against central finite differences of the pooled loss, over two
// micro-batches with repeated ids, per-sample weights, sum and mean pooling; evaluation lookups
// change nothing; unadmitted ids read zeros (no gradient) or the default row (its gradient); a
// table trained on 4 ranks and resharded to 2 (and to 1) keeps every row with its optimizer
// state, counters and pending counts.
#include "embedding/dynamic_tables.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "comm/local/local_comm.h"

namespace zt {
namespace {

struct Bags {
    std::vector<int64_t> ids;
    std::vector<int64_t> offsets;
    std::vector<float> weights;
    ClickBatch batch() const {
        ClickBatch b;
        b.B = static_cast<int64_t>(offsets.size()) - 1;
        b.ids = {ids};
        b.offsets = {offsets};
        b.weights = {weights};
        return b;
    }
};

// L = sum over bags b and columns c of coef[b][c] * pooled[b][c], in double.
double pooled_loss(DynamicTables& t, const Bags& bags, ops::BagPooling pooling,
                   const std::vector<float>& coef) {
    MemoryPool pool;
    Tape tape(pool);
    tape.set_recording(false);
    const std::vector<ops::BagPooling> p = {pooling};
    const std::vector<float> out = t.lookup(tape, bags.batch(), p)[0]->value.to_vector();
    double l = 0;
    for (size_t i = 0; i < out.size(); ++i) l += static_cast<double>(coef[i]) * out[i];
    return l;
}

void check(ops::BagPooling pooling, UnadmittedRow unadmitted) {
    constexpr int64_t kDim = 3;
    DynamicTableOptions o;
    o.name = "emb_l.0.weight";
    o.dim = kDim;
    o.min_count = 2;  // ids seen in one micro-batch only stay unadmitted
    o.unadmitted = unadmitted;
    o.init = ParamInit::uniform(0.5f);
    DynamicTablesOptions to;  // sparse SGD
    MemoryPool pool;
    DynamicTables t(pool, {o}, {0}, nullptr, to);
    // Two micro-batches: ids 7, 9 and 2^31 - 1 come in both (admitted on the second sighting,
    // the first micro-batch then read them unadmitted), 4 and 5 once.
    const std::vector<Bags> mbs_weighted = {
        {{7, 9, 7, 4, 2147483647}, {0, 3, 3, 5}, {0.5f, 2.0f, -1.0f, 1.5f, 0.25f}},
        {{9, 5, 7, 2147483647, 9}, {0, 2, 5}, {1.0f, 0.75f, 3.0f, -0.5f, 2.0f}}};
    std::vector<Bags> mbs = mbs_weighted;
    if (pooling == ops::BagPooling::kMean)  // weights go with sum pooling only (as PyTorch)
        for (Bags& b : mbs) b.weights.clear();
    std::vector<std::vector<float>> coef;
    for (const Bags& b : mbs) {
        std::vector<float> c(static_cast<size_t>((b.offsets.size() - 1) * kDim));
        for (size_t i = 0; i < c.size(); ++i) c[i] = 0.3f * static_cast<float>(i % 5) - 0.5f;
        coef.push_back(c);
    }
    const std::vector<ops::BagPooling> p = {pooling};
    for (size_t m = 0; m < mbs.size(); ++m) {
        Tape tape(pool);
        Var out = t.lookup(tape, mbs[m].batch(), p)[0];
        Tensor g = Tensor::empty(pool, out->value.shape(), DType::kF32, MemCategory::kActivations);
        std::copy(coef[m].begin(), coef[m].end(), g.data<float>());
        tape.backward_from(std::move(out), g);
    }
    DynamicTable& table = t.table(0);
    ASSERT_EQ(table.rows(), 3);  // 7, 9, 2^31 - 1
    // The first micro-batch read 7, 9 and 2^31 - 1 before their admission (as unadmitted ids), so
    // a row's gradient is the second micro-batch's part only: evaluation lookups of it (which
    // find the three ids admitted) give the finite differences.
    std::vector<std::vector<float>> before;
    for (int64_t s = 0; s < 3; ++s) before.emplace_back(table.row(s), table.row(s) + kDim);
    std::vector<float> def_before;
    if (table.default_row()) def_before.assign(table.default_row(), table.default_row() + kDim);
    t.finish_grads();
    t.step(1.0, 1.0, 1);  // SGD with lr 1: the applied gradient is before - after
    const double eps = 1e-3;
    for (int64_t s = 0; s < 3; ++s) {
        const int64_t slot = table.find(table.id_of(s));
        for (int64_t c = 0; c < kDim; ++c) {
            const double applied =
                before[static_cast<size_t>(s)][static_cast<size_t>(c)] - table.row(slot)[c];
            float* w = table.storage().f32 + slot * kDim + c;
            const float keep = *w;
            *w = keep + static_cast<float>(eps);
            const double lp = pooled_loss(t, mbs[1], pooling, coef[1]);
            *w = keep - static_cast<float>(eps);
            const double lm = pooled_loss(t, mbs[1], pooling, coef[1]);
            *w = keep;
            EXPECT_NEAR(applied, (lp - lm) / (2 * eps), 2e-3) << "id " << table.id_of(s);
        }
    }
    if (unadmitted == UnadmittedRow::kZeros) {
        EXPECT_EQ(table.default_row(), nullptr);
        return;
    }
    // The default row: the first micro-batch read it for every id (as a table that admits
    // nothing does), the second for 5 only.
    DynamicTableOptions o2 = o;
    o2.min_count = 1000;
    DynamicTables fresh(pool, {o2}, {0}, nullptr, to);
    SparseRowStorage d = fresh.table(0).default_storage();
    std::copy(def_before.begin(), def_before.end(), d.f32);
    SparseRowStorage dt = table.default_storage();
    for (int64_t c = 0; c < kDim; ++c) {
        const double applied = def_before[static_cast<size_t>(c)] - table.default_row()[c];
        double diff = 0;
        for (int sign : {1, -1}) {
            const float keep = d.f32[c], keep_t = dt.f32[c];
            d.f32[c] = keep + static_cast<float>(sign * eps);
            dt.f32[c] = keep_t + static_cast<float>(sign * eps);
            // First micro-batch: every id unadmitted; second: 5 only (as t finds them now).
            diff += sign * (pooled_loss(fresh, mbs[0], pooling, coef[0]) +
                            pooled_loss(t, mbs[1], pooling, coef[1]));
            d.f32[c] = keep;
            dt.f32[c] = keep_t;
        }
        EXPECT_NEAR(applied, diff / (2 * eps), 2e-3);
    }
}

TEST(DynamicTables, GradientsMatchFiniteDifferencesSumZeros) {
    check(ops::BagPooling::kSum, UnadmittedRow::kZeros);
}
TEST(DynamicTables, GradientsMatchFiniteDifferencesMeanDefaultRow) {
    check(ops::BagPooling::kMean, UnadmittedRow::kDefaultRow);
}

TEST(DynamicTables, EvaluationLookupsChangeNothing) {
    DynamicTableOptions o;
    o.name = "emb_l.0.weight";
    o.dim = 2;
    o.init = ParamInit::uniform(0.5f);
    MemoryPool pool;
    DynamicTables t(pool, {o}, {0}, nullptr, {});
    const Bags b{{1, 2, 3}, {0, 1, 3}, {}};
    const double l = pooled_loss(t, b, ops::BagPooling::kSum, {1, 1, 1, 1});
    EXPECT_EQ(l, 0.0);  // nothing admitted: zeros
    EXPECT_EQ(t.table(0).rows(), 0);
    EXPECT_EQ(t.table(0).stats().pending, 0);
}

// Every row of a table over all ranks' blocks: id -> (row, state, last seen, count), and the
// pending ids: id -> (count, last seen) (Note [Dynamic table state]).
struct Union {
    std::map<uint64_t, std::tuple<std::vector<float>, std::vector<float>, uint64_t, uint64_t>> rows;
    std::map<uint64_t, std::pair<uint64_t, uint64_t>> pending;
    std::vector<uint64_t> evicted;
    uint64_t admissions = 0, evictions = 0;
};

Union union_of(const std::vector<SparseBlock>& blocks, int64_t dim, int64_t sc) {
    Union u;
    for (const SparseBlock& b : blocks) {
        const std::vector<uint64_t>& w = b.aux;
        const auto n = static_cast<size_t>(w[1]), p = static_cast<size_t>(w[2]),
                   e = static_cast<size_t>(w[3]);
        u.admissions += w[5];
        u.evictions += w[6];
        for (size_t i = 0; i < n; ++i) {
            const auto d = static_cast<size_t>(dim), c = static_cast<size_t>(sc);
            EXPECT_EQ(u.rows.count(w[8 + i]), 0u) << "an id on two ranks";
            u.rows[w[8 + i]] = {
                std::vector<float>(b.weights.begin() + i * d, b.weights.begin() + (i + 1) * d),
                std::vector<float>(b.state.begin() + i * c, b.state.begin() + (i + 1) * c),
                w[8 + n + i], w[8 + 2 * n + i]};
        }
        for (size_t i = 0; i < p; ++i)
            u.pending[w[8 + 3 * n + i]] = {w[8 + 3 * n + p + i], w[8 + 3 * n + 2 * p + i]};
        u.evicted.insert(u.evicted.end(), w.begin() + 8 + 3 * n + 3 * p,
                         w.begin() + 8 + 3 * n + 3 * p + e);
    }
    std::sort(u.evicted.begin(), u.evicted.end());
    return u;
}

TEST(DynamicTables, ReshardingFourRanksToTwoAndOneKeepsEveryRowAndItsState) {
    DynamicTableOptions o;
    o.name = "emb_l.0.weight";
    o.dim = 5;
    o.min_count = 2;
    o.evict_unseen_steps = 3;
    o.init = ParamInit::uniform(0.5f);
    DynamicTablesOptions to;
    to.optimizer.kind = SparseOptimKind::kAdagrad;
    std::vector<SparseBlock> four(4);
    run_local_ranks(4, [&](Communicator& comm) {
        MemoryPool pool;
        DynamicTables t(pool, {o}, {0}, &comm, to);
        for (int step = 0; step < 6; ++step) {
            Bags b;
            b.offsets = {0};
            for (int k = 0; k < 24; ++k) {  // ids shared by the ranks and ids of one rank
                b.ids.push_back((k * 7 + step * 3) % 40 + (k % 3 == 0 ? 1000 * comm.rank() : 0));
                if (k % 2 == 1) b.offsets.push_back(static_cast<int64_t>(b.ids.size()));
            }
            Tape tape(pool);
            Var out =
                t.lookup(tape, b.batch(), std::vector<ops::BagPooling>{ops::BagPooling::kSum})[0];
            Tensor g =
                Tensor::empty(pool, out->value.shape(), DType::kF32, MemCategory::kActivations);
            for (int64_t i = 0; i < g.numel(); ++i)
                g.data<float>()[i] = 0.01f * static_cast<float>(i % 7) - 0.02f;
            tape.backward_from(std::move(out), g);
            t.finish_grads();
            t.step(0.1, 0.1, step + 1);
        }
        four[static_cast<size_t>(comm.rank())] = t.blocks(0)[0];
    });
    const int64_t sc = sparse_state_per_row(to.optimizer.kind, o.dim);
    const Union want = union_of(four, o.dim, sc);
    ASSERT_GT(want.rows.size(), 20u);
    ASSERT_FALSE(want.pending.empty());
    ASSERT_FALSE(want.evicted.empty());
    for (int ranks : {2, 1}) {
        std::vector<SparseBlock> got(static_cast<size_t>(ranks));
        run_local_ranks(ranks, [&](Communicator& comm) {
            MemoryPool pool;
            DynamicTables t(pool, {o}, {0}, &comm, to);
            for (const SparseBlock& b : four)
                if (t.overlaps(0, b)) t.load_block(0, b);
            got[static_cast<size_t>(comm.rank())] = t.blocks(0)[0];
        });
        const Union u = union_of(got, o.dim, sc);
        EXPECT_EQ(u.rows, want.rows) << ranks << " ranks";
        EXPECT_EQ(u.pending, want.pending) << ranks << " ranks";
        EXPECT_EQ(u.evicted, want.evicted) << ranks << " ranks";
        EXPECT_EQ(u.admissions, want.admissions);
        EXPECT_EQ(u.evictions, want.evictions);
    }
}

}  // namespace
}  // namespace zt
