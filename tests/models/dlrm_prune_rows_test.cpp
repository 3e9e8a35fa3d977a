// DLRM embedding rows pruned by lookup count (compression.pruning "rows", docs/pruning.md) in the
// engine on the local backend: after every step the zero rows of each table are exactly the ones
// a reference picks from a naive count of the ids of every sample seen so far (lowest counts,
// ties to the lower row, the schedule's count at the last update, rows pruned before kept), every
// element of a pruned row is exactly 0, and 2 and 4 data-parallel ranks at ZeRO stages 0-3
// choose the same rows and train like one process (the equivalence rule); an offloaded optimizer
// gives the in-memory bits.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "click_steps.h"
#include "comm/local/local_comm.h"
#include "compression/prune_rows.h"
#include "compression/prune_schedule.h"
#include "data/click/click_dataset.h"
#include "data/click/synth_ctr.h"
#include "models/dlrm/dlrm.h"
#include "optim/adamw.h"
#include "tensor/threads.h"

namespace zt {
namespace {

namespace fs = std::filesystem;

// Row counts that 4 ranks do not divide; Zipf ids leave many rows at equal counts (ties).
const std::vector<int64_t> kRows = {37, 20, 9};
constexpr int64_t kDim = 8, kMicro = 8, kSteps = 10, kAccum = 4;  // 32 samples a step

DlrmOptions model_options() {
    DlrmOptions o;
    o.dense_features = 13;
    for (int64_t r : kRows) o.tables.push_back({r, kDim, ops::BagPooling::kSum});
    o.bottom_mlp = {16, kDim};
    o.top_mlp = {16, 1};
    return o;
}

PruningOptions rows_options() {
    PruningOptions p;
    p.type = "rows";
    p.final_sparsity = 0.5;
    p.start_step = 2;
    p.end_step = 8;
    p.frequency = 3;  // updates after steps 2, 5, 8
    return p;
}

struct RowsRun {
    std::vector<double> loss;
    std::vector<std::vector<float>> weights;  // whole master after each step
};

void train_rank(const ClickDataset& ds, int ranks, int stage, Communicator* comm, RowsRun* out,
                const std::string& offload = "none") {
    set_num_threads(1);
    const int rank = comm ? comm->rank() : 0;
    MemoryPool pool;
    EngineOptions eo;
    eo.grad_accum = kAccum / ranks;
    eo.lr = 0.02;
    eo.seed = 5;
    AdamWOptions ao;
    ao.weight_decay = 0.1;
    eo.optimizer = std::make_unique<AdamW>(ao);
    eo.comm = comm;
    eo.zero.stage = stage;
    eo.zero.reduce_bucket_size = 300;
    eo.zero.allgather_bucket_size = 400;
    eo.pruning = rows_options();
    eo.offload_optimizer.device = offload;
    Engine e(pool, std::make_unique<Dlrm>(model_options()), std::move(eo));
    ClickBatchBuffers buf;
    for (int64_t step = 0; step < kSteps; ++step) {
        const StepStats st = click_step(e, ds, buf, step, kAccum / ranks, kMicro, rank, ranks);
        std::vector<float> w = e.gather_master();
        if (rank == 0) {
            out->loss.push_back(st.loss);
            out->weights.push_back(std::move(w));
        }
    }
}

// The tables' places in the arena (the model's parameter order, as the engine places them).
std::vector<PruneRowTable> tables() {
    Dlrm m(model_options());
    int64_t off = 0;
    for (Parameter* p : m.parameters()) {
        p->offset = off;
        off += p->numel();
    }
    return m.prune_row_tables();
}

// The reference: the rows pruned after each step from a naive count of the ids of every sample
// of the steps so far (one process's order).
std::vector<std::vector<std::vector<uint8_t>>> reference_masks(const ClickDataset& ds) {
    const std::vector<PruneRowTable> ts = tables();
    const PruningOptions p = rows_options();
    std::vector<std::vector<double>> counts;
    std::vector<std::vector<uint8_t>> mask;
    for (const PruneRowTable& t : ts) {
        counts.emplace_back(static_cast<size_t>(t.rows), 0.0);
        mask.emplace_back(static_cast<size_t>(t.rows), 0);
    }
    std::vector<std::vector<std::vector<uint8_t>>> out;
    ClickBatchBuffers buf;
    for (int64_t step = 0; step < kSteps; ++step) {
        for (int64_t m = 0; m < kAccum; ++m) {
            ds.fill(global_sample_index(step, m, 0, kMicro, kAccum, 1, 0), kMicro, buf);
            const ClickBatch b = buf.view();
            for (size_t k = 0; k < ts.size(); ++k)
                for (int64_t id : b.ids[static_cast<size_t>(ts[k].feature)])
                    counts[k][static_cast<size_t>(id)] += 1.0;
        }
        if (prune_updates_at(p, step + 1))
            for (size_t k = 0; k < ts.size(); ++k) {
                const int64_t want = prune_count(prune_sparsity_at(p, step + 1), ts[k].rows);
                // Lowest (count, row) first among the rows not pruned yet.
                std::vector<std::pair<double, int64_t>> order;
                int64_t have = 0;
                for (int64_t r = 0; r < ts[k].rows; ++r) {
                    if (mask[k][static_cast<size_t>(r)])
                        ++have;
                    else
                        order.push_back({counts[k][static_cast<size_t>(r)], r});
                }
                std::sort(order.begin(), order.end());
                for (int64_t i = 0; i < want - have; ++i)
                    mask[k][static_cast<size_t>(order[static_cast<size_t>(i)].second)] = 1;
            }
        out.push_back(mask);
    }
    return out;
}

// Per table, the rows whose every element is 0, and whether some other row is all zero partly
// (a pruned row must be exactly 0 in every element).
std::vector<uint8_t> zero_rows(const std::vector<float>& w, const PruneRowTable& t) {
    std::vector<uint8_t> z(static_cast<size_t>(t.rows), 1);
    for (int64_t r = 0; r < t.rows; ++r)
        for (int64_t c = 0; c < t.dim; ++c)
            if (w[static_cast<size_t>(t.offset + r * t.dim + c)] != 0.0f)
                z[static_cast<size_t>(r)] = 0;
    return z;
}

TEST(DlrmPruneRows, RowsFollowTheCountsOnEveryLayout) {
    const fs::path dir = fs::temp_directory_path() / "zt_dlrm_prune_rows";
    fs::create_directories(dir);
    const std::string path = (dir / "d.ctr").string();
    SynthCtrOptions so;
    so.records = 2000;
    so.seed = 7;
    so.table_rows = kRows;
    so.hotness = 2;
    write_synth_ctr(so, path);
    ClickDatasetOptions dopt;
    dopt.seed = 3;
    const ClickDataset ds(CtrFile::open(path), dopt);
    const auto want = reference_masks(ds);
    const std::vector<PruneRowTable> ts = tables();
    RowsRun ref;
    train_rank(ds, 1, 0, nullptr, &ref);
    ASSERT_EQ(ref.weights.size(), static_cast<size_t>(kSteps));
    for (size_t s = 0; s < ref.weights.size(); ++s)
        for (size_t k = 0; k < ts.size(); ++k)
            EXPECT_EQ(zero_rows(ref.weights[s], ts[k]), want[s][k])
                << "one process, step " << s + 1 << ", " << ts[k].name;
    // The final fraction: floor(0.5 x rows) of each table.
    for (size_t k = 0; k < ts.size(); ++k) {
        const auto z = zero_rows(ref.weights.back(), ts[k]);
        EXPECT_EQ(std::count(z.begin(), z.end(), uint8_t{1}), ts[k].rows / 2) << ts[k].name;
    }
    struct Layout {
        int ranks, stage;
    };
    for (const Layout l : {Layout{2, 0}, Layout{2, 3}, Layout{4, 1}, Layout{4, 2}}) {
        RowsRun r;
        run_local_ranks(l.ranks,
                        [&](Communicator& c) { train_rank(ds, l.ranks, l.stage, &c, &r); });
        ASSERT_EQ(r.loss.size(), ref.loss.size());
        double worst = 0;
        for (size_t s = 0; s < r.loss.size(); ++s) {
            for (size_t k = 0; k < ts.size(); ++k)
                ASSERT_EQ(zero_rows(r.weights[s], ts[k]), want[s][k])
                    << l.ranks << " ranks, stage " << l.stage << ", step " << s + 1;
            const double d = std::abs(r.loss[s] - ref.loss[s]) / std::abs(ref.loss[s]);
            worst = std::max(worst, d);
            EXPECT_LT(d, 1e-4) << l.ranks << " ranks, stage " << l.stage << ", step " << s + 1;
        }
        std::printf("%d ranks, stage %d: largest relative loss difference %.3g\n", l.ranks, l.stage,
                    worst);
    }
    // An offloaded optimizer (the mask and the moments on the host tier): the in-memory bits
    // (2 ranks at stage 1, where offload applies).
    RowsRun mem, off;
    run_local_ranks(2, [&](Communicator& c) { train_rank(ds, 2, 1, &c, &mem); });
    run_local_ranks(2, [&](Communicator& c) { train_rank(ds, 2, 1, &c, &off, "cpu"); });
    EXPECT_EQ(off.loss, mem.loss);
    EXPECT_EQ(off.weights, mem.weights);
    fs::remove_all(dir);
}

}  // namespace
}  // namespace zt
