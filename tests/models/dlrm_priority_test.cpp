// comm.priority with sharded embedding tables (Note [Priority] in zero_grad_buckets.cpp): in a
// DLRM backward with overlap_comm, the dense buckets that fill before the tables' gradient rows
// are exchanged (the top MLP's) wait for that all-to-all, so the rows the sparse update needs do
// not queue behind them; without priority they are issued as they fill. Read from the issue order
// of a recording communicator on rank 0; the bits are the same either way. The rows' all-to-all
// itself stays in flight while the rest of the backward runs (Note [Gradient rows in flight]).
#include <gtest/gtest.h>

#include <filesystem>

#include "click_steps.h"
#include "comm/local/local_comm.h"
#include "data/click/click_dataset.h"
#include "data/click/synth_ctr.h"
#include "models/dlrm/dlrm.h"
#include "optim/sgd.h"
#include "parallel/recording_comm.h"
#include "runtime/engine.h"
#include "tensor/threads.h"

namespace zt {
namespace {

namespace fs = std::filesystem;

const std::vector<int64_t> kRows = {300, 200, 100, 60};
constexpr int64_t kDim = 8, kMicro = 8, kSteps = 3;

DlrmOptions model_options() {
    DlrmOptions o;
    o.dense_features = 13;
    for (int64_t r : kRows) o.tables.push_back({r, kDim, ops::BagPooling::kSum});
    o.bottom_mlp = {32, 16, kDim};
    o.top_mlp = {32, 16, 1};
    o.embedding.enabled = true;
    o.embedding.sharding.assign(kRows.size(), ShardKind::kTable);
    return o;
}

struct Recorded {
    Log log;                   // rank 0's events
    std::vector<double> loss;  // rank 0's step losses
    std::vector<float> master;
};

// kSteps steps of SGD on 2 local ranks (accumulation 2), ZeRO-1 with overlap_comm and buckets
// small enough that the top MLP fills several before the backward reaches the tables.
Recorded train(const ClickDataset& ds, bool priority) {
    Recorded out;
    std::vector<Log> logs(2);
    run_local_ranks(2, [&](Communicator& c) {
        set_num_threads(1);
        Log* log = &logs[static_cast<size_t>(c.rank())];
        RecordingComm rc(c, log);
        MemoryPool pool;
        EngineOptions eo;
        eo.optimizer = std::make_unique<Sgd>(SgdOptions{});
        eo.lr = 0.2;
        eo.seed = 3;
        eo.comm = &rc;
        eo.micro_batch = kMicro;
        eo.grad_accum = 2;
        eo.zero.stage = 1;
        eo.zero.overlap_comm = true;
        eo.zero.reduce_bucket_size = 200;
        eo.zero.priority = priority;
        Engine e(pool, std::make_unique<Dlrm>(model_options()), std::move(eo));
        ClickBatchBuffers buf;
        log->clear();  // the constructor's collectives are not a step's
        for (int64_t step = 0; step < kSteps; ++step) {
            for (int64_t m = 0; m < 2; ++m) {
                ds.fill(global_sample_index(step, m, c.rank(), kMicro, 2, 2, 0), kMicro, buf);
                const ClickBatch click = buf.view();
                Batch b;
                b.B = click.B;
                b.click = &click;
                log->push_back({Event::kMicroStart});
                e.forward_backward(b);
                log->push_back({Event::kMicroEnd});
            }
            const StepStats st = e.step();
            if (c.rank() == 0) out.loss.push_back(st.loss);
        }
        std::vector<float> master = e.gather_master();
        if (c.rank() == 0) out.master = std::move(master);
    });
    out.log = std::move(logs[0]);
    return out;
}

// Per micro-step: dense reductions issued before the backward's row exchange (the last f32
// all-to-all of the micro-step; the forward's row fetch is the one before it), and in all.
struct Order {
    int before = 0, total = 0, micro_steps = 0;
    int rows_in_flight = 0;  // micro-steps whose rows were waited for after their backward
};
Order count(const Log& log) {
    Order o;
    size_t begin = 0;
    for (size_t i = 0; i < log.size(); ++i) {
        if (log[i].kind == Event::kMicroStart) begin = i;
        if (log[i].kind != Event::kMicroEnd) continue;
        ++o.micro_steps;
        size_t rows = i;
        for (size_t j = begin; j < i; ++j)
            if (log[j].kind == Event::kIssue && log[j].op == CollectiveKind::kAllToAll &&
                log[j].type == CommType::kF32)
                rows = j;
        EXPECT_LT(rows, i) << "no row exchange in micro-step " << o.micro_steps;
        // Waited for only after forward_backward returned: in flight across the rest of the
        // backward (Note [Gradient rows in flight]).
        for (size_t j = rows + 1; j < log.size(); ++j)
            if (log[j].kind == Event::kWait && log[j].id == log[rows].id) {
                o.rows_in_flight += j > i;
                break;
            }
        for (size_t j = begin; j < i; ++j) {
            if (log[j].kind != Event::kIssue || !is_reduction(log[j])) continue;
            ++o.total;
            if (j < rows) ++o.before;
        }
    }
    return o;
}

TEST(DlrmPriority, EmbeddingRowsGoBeforeDenseBuckets) {
    const fs::path dir = fs::temp_directory_path() / "zt_dlrm_priority";
    fs::remove_all(dir);
    fs::create_directories(dir);
    SynthCtrOptions so;
    so.records = 400;
    so.seed = 11;
    so.table_rows = kRows;
    write_synth_ctr(so, (dir / "d.ctr").string());
    ClickDatasetOptions dopt;
    dopt.seed = 2;
    const ClickDataset ds(CtrFile::open((dir / "d.ctr").string()), dopt);

    const Recorded off = train(ds, false);
    const Recorded on = train(ds, true);
    const Order o_off = count(off.log), o_on = count(on.log);

    std::printf("[ sched ] priority off: %d of %d reductions before the rows; on: %d of %d\n",
                o_off.before, o_off.total, o_on.before, o_on.total);
    EXPECT_EQ(o_on.micro_steps, 2 * kSteps);
    EXPECT_GT(o_off.total, 2 * kSteps);  // several buckets a micro-step, or nothing is tested
    EXPECT_EQ(o_on.total, o_off.total);
    EXPECT_GT(o_off.before, 0) << "the top MLP's buckets fill before the rows are exchanged";
    EXPECT_EQ(o_on.before, 0);
    // The rows' all-to-all is left in flight while the rest of the backward runs.
    EXPECT_EQ(o_on.rows_in_flight, o_on.micro_steps);
    EXPECT_EQ(o_off.rows_in_flight, o_off.micro_steps);
    // Only the order changes.
    EXPECT_EQ(on.loss, off.loss);
    EXPECT_EQ(on.master, off.master);
    fs::remove_all(dir);
}

}  // namespace
}  // namespace zt
