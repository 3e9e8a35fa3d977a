// Pruning in the engine (docs/pruning.md) on the local backend: pruned weights are exactly zero
// after every step at ZeRO stages 0-3 on 1, 2 and 4 ranks (sizes that do not divide the rank
// count included), with the count the schedule's formula gives; every layout computes the same
// masks and trains like one process (the equivalence rule); N:M patterns hold in every block;
// an offloaded optimizer gives the in-memory bits; bf16 compute copies are zero where pruned;
// a resume continues the uninterrupted run's bits.
#include <gtest/gtest.h>

#include <cmath>

#include "comm/local/local_comm.h"
#include "compression/masked_optimizer.h"
#include "models/gpt/gpt.h"
#include "optim/adamw.h"
#include "runtime/engine.h"
#include "runtime/toy_sequences.h"
#include "tensor/threads.h"

namespace zt {
namespace {

constexpr int64_t kV = 48, kT = 8, kSteps = 12, kMicro = 2;

struct PruneSetup {
    int ranks = 1;
    int stage = 0;
    int64_t grad_accum = 2;  // per rank
    DType compute = DType::kF32;
    std::string offload = "none";
    PruningOptions pruning;
};

struct PruneRun {
    std::vector<double> loss;
    std::vector<std::vector<float>> weights;  // whole master after each step
    std::vector<int64_t> pruned;              // the pruner's count after each step
    std::vector<float> compute_at_end;        // bf16 compute copy as f32 (stages 0-2)
};

PruningOptions gradual() {
    PruningOptions p;
    p.type = "magnitude";
    p.final_sparsity = 0.6;
    p.initial_sparsity = 0.1;
    p.start_step = 2;
    p.end_step = 8;
    p.frequency = 3;  // updates after steps 2, 5, 8
    return p;
}

std::unique_ptr<Engine> make_engine(MemoryPool& pool, const PruneSetup& s, Communicator* comm) {
    EngineOptions eo;
    eo.compute_dtype = s.compute;
    eo.grad_accum = s.grad_accum;
    eo.gradient_clipping = 1.0;
    eo.lr = 3e-3;
    eo.seed = 5;
    AdamWOptions ao;
    ao.weight_decay = 0.1;
    eo.optimizer = std::make_unique<AdamW>(ao);
    eo.comm = comm;
    eo.zero.stage = s.stage;
    eo.zero.reduce_bucket_size = 700;
    eo.zero.allgather_bucket_size = 1000;
    eo.offload_optimizer.device = s.offload;
    eo.offload_optimizer.sub_group_size = 900;
    eo.pruning = s.pruning;
    // 2 layers, d_model 18: parameter counts that 4 ranks do not divide.
    return std::make_unique<Engine>(pool, std::make_unique<Gpt>(GptOptions{kV, kT, 18, 2, 2}),
                                    std::move(eo));
}

void train_steps(Engine& e, const PruneSetup& s, int rank, int64_t from, int64_t to,
                 PruneRun* out) {
    std::vector<int32_t> in(kMicro * kT), tg(kMicro * kT);
    for (int64_t step = from; step < to; ++step) {
        for (int64_t m = 0; m < s.grad_accum; ++m) {
            testing::toy_micro_batch(in, tg, step, m, rank, kMicro, s.grad_accum, s.ranks, kT, kV);
            e.forward_backward(Batch{in, tg, kMicro, kT});
        }
        const StepStats st = e.step();
        std::vector<float> w = e.gather_master();
        if (rank == 0) {
            out->loss.push_back(st.loss);
            out->weights.push_back(std::move(w));
            out->pruned.push_back(
                e.pruner()->metrics(e.steps_done(), false)["pruned"].get<int64_t>());
        }
    }
}

PruneRun train(const PruneSetup& s) {
    PruneRun r;
    run_local_ranks(s.ranks, [&](Communicator& c) {
        set_num_threads(1);
        MemoryPool pool;
        auto e = make_engine(pool, s, s.ranks > 1 ? &c : nullptr);
        train_steps(*e, s, c.rank(), 0, kSteps, &r);
        if (c.rank() == 0 && s.stage < 3) {
            const Tensor& cp = e->arena().compute();
            r.compute_at_end.resize(static_cast<size_t>(cp.numel()));
            for (int64_t i = 0; i < cp.numel(); ++i)
                r.compute_at_end[static_cast<size_t>(i)] = cp.dtype() == DType::kBF16
                                                               ? bf16_to_f32(cp.data<bf16>()[i])
                                                               : cp.data<float>()[i];
        }
    });
    return r;
}

// The pruned positions of the Linear weights (the targets) in a whole master.
std::vector<uint8_t> zeros_of(const std::vector<float>& w, const std::vector<PruneTarget>& t) {
    std::vector<uint8_t> z(w.size(), 0);
    for (const PruneTarget& x : t)
        for (int64_t i = x.offset; i < x.offset + x.numel(); ++i)
            z[static_cast<size_t>(i)] = w[static_cast<size_t>(i)] == 0.0f;
    return z;
}

std::vector<PruneTarget> targets() {
    MemoryPool pool;
    Gpt g(GptOptions{kV, kT, 18, 2, 2});
    std::vector<Parameter*> ps = g.parameters();
    int64_t off = 0;
    for (Parameter* p : ps) {
        p->offset = off;
        off += p->numel();
    }
    return prune_targets(ps, {});
}

int64_t target_numel() {
    int64_t n = 0;
    for (const PruneTarget& t : targets()) n += t.numel();
    return n;
}

// After every step: the zeros among the targets are exactly the pruned count, which is the
// formula's at the last mask update.
void expect_schedule(const PruneRun& r, const PruningOptions& p, const std::string& what) {
    const std::vector<PruneTarget> t = targets();
    int64_t want = 0;
    for (int64_t step = 1; step <= kSteps; ++step) {
        if (prune_updates_at(p, step))
            want = prune_count(prune_sparsity_at(p, step), target_numel());
        const std::vector<uint8_t> z = zeros_of(r.weights[static_cast<size_t>(step - 1)], t);
        int64_t zeros = 0;
        for (uint8_t b : z) zeros += b;
        EXPECT_EQ(zeros, want) << what << " step " << step;
        EXPECT_EQ(r.pruned[static_cast<size_t>(step - 1)], want) << what << " step " << step;
    }
}

TEST(Pruning, PrunedWeightsStayZeroAndEveryLayoutTrainsLikeOneProcess) {
    PruneSetup one;
    one.grad_accum = 4;
    one.pruning = gradual();
    const PruneRun ref = train(one);
    expect_schedule(ref, one.pruning, "one process");
    const std::vector<PruneTarget> t = targets();
    const std::vector<uint8_t> ref_mask = zeros_of(ref.weights.back(), t);
    for (int ranks : {2, 4})
        for (int stage = 0; stage <= 3; ++stage) {
            if (ranks == 4 && (stage == 0 || stage == 2)) continue;  // time: 1 and 3 cover it
            PruneSetup s;
            s.ranks = ranks;
            s.stage = stage;
            s.grad_accum = 4 / ranks;
            s.pruning = gradual();
            const PruneRun r = train(s);
            const std::string what = str_cat(ranks, " ranks, stage ", stage);
            expect_schedule(r, s.pruning, what);
            // The same masks as one process (weights within fp32 rounding pick the same ones).
            EXPECT_EQ(zeros_of(r.weights.back(), t), ref_mask) << what;
            double worst = 0;
            for (size_t i = 0; i < r.loss.size(); ++i)
                worst = std::max(worst, std::fabs(r.loss[i] - ref.loss[i]) / ref.loss[i]);
            EXPECT_LE(worst, 1e-4) << what;  // DESIGN's fp32 tolerance
        }
}

TEST(Pruning, PerLayerScopePrunesEachMatrixToTheSparsity) {
    PruneSetup s;
    s.ranks = 2;
    s.stage = 2;
    s.pruning = gradual();
    s.pruning.scope = "layer";
    const PruneRun r = train(s);
    for (const PruneTarget& x : targets()) {
        int64_t zeros = 0;
        for (int64_t i = x.offset; i < x.offset + x.numel(); ++i)
            zeros += r.weights.back()[static_cast<size_t>(i)] == 0.0f;
        EXPECT_EQ(zeros, prune_count(0.6, x.numel())) << x.name;
    }
}

TEST(Pruning, NmPatternHoldsInEveryBlockAfterTraining) {
    PruneSetup s;
    s.ranks = 2;
    s.stage = 3;
    s.pruning.type = "nm";
    s.pruning.n = 2;
    s.pruning.m = 4;
    s.pruning.start_step = 3;
    s.pruning.end_step = 9;
    s.pruning.frequency = 3;
    const PruneRun r = train(s);
    for (const PruneTarget& x : targets())
        for (int64_t row = 0; row < x.rows; ++row)
            for (int64_t b = 0; b < x.cols; b += 4) {
                const int64_t len = std::min<int64_t>(4, x.cols - b);
                int64_t nonzero = 0;
                for (int64_t i = 0; i < len; ++i)
                    nonzero +=
                        r.weights.back()[static_cast<size_t>(x.offset + row * x.cols + b + i)] !=
                        0.0f;
                EXPECT_LE(nonzero, 2) << x.name << " row " << row << " block " << b;
            }
    // Before start nothing is pruned; from the first update on, len - n of every block (the
    // last block of an 18-wide row is 2 long and keeps both).
    int64_t want = 0;
    for (const PruneTarget& x : targets())
        for (int64_t b = 0; b < x.cols; b += 4)
            want += x.rows * std::max<int64_t>(0, std::min<int64_t>(4, x.cols - b) - 2);
    EXPECT_EQ(r.pruned[1], 0);
    for (size_t i = 2; i < r.pruned.size(); ++i) EXPECT_EQ(r.pruned[i], want) << i;
}

TEST(Pruning, OffloadedOptimizerGivesTheInMemoryBits) {
    PruneSetup s;
    s.ranks = 2;
    s.stage = 1;
    s.pruning = gradual();
    const PruneRun mem = train(s);
    s.offload = "cpu";
    const PruneRun off = train(s);
    EXPECT_EQ(off.loss, mem.loss);
    EXPECT_EQ(off.weights.back(), mem.weights.back());
}

TEST(Pruning, Bf16ComputeCopyIsZeroWherePruned) {
    PruneSetup s;
    s.ranks = 2;
    s.stage = 2;
    s.compute = DType::kBF16;
    s.pruning = gradual();
    const PruneRun r = train(s);
    ASSERT_EQ(r.compute_at_end.size(), r.weights.back().size());
    const std::vector<uint8_t> z = zeros_of(r.weights.back(), targets());
    int64_t checked = 0;
    for (size_t i = 0; i < z.size(); ++i)
        if (z[i]) {
            EXPECT_EQ(r.compute_at_end[i], 0.0f) << i;
            ++checked;
        }
    EXPECT_EQ(checked, prune_count(0.6, target_numel()));
}

// A run stopped after step 6 and resumed from its state on another ZeRO stage (the master and the
// optimizer state, mask included, copied by name) continues the uninterrupted bits.
TEST(Pruning, MaskTravelsWithTheOptimizerState) {
    PruneSetup s;
    s.ranks = 2;
    s.stage = 1;
    s.pruning = gradual();
    const PruneRun full = train(s);
    PruneRun resumed;
    run_local_ranks(2, [&](Communicator& c) {
        set_num_threads(1);
        MemoryPool pool;
        auto a = make_engine(pool, s, &c);
        PruneRun first;
        train_steps(*a, s, c.rank(), 0, 6, &first);
        // Every tensor of the update state, whole, as a checkpoint holds it by name.
        UpdateState& sa = a->update_state();
        std::vector<std::vector<float>> whole;
        for (size_t k = 0; k < sa.names().size(); ++k) {
            std::vector<float> mine(static_cast<size_t>(sa.numel()));
            sa.read(static_cast<int>(k), 0, sa.numel(), mine.data());
            whole.push_back(a->data_parallel().gather_update_ranges(mine.data()));
        }
        const EngineCounters counters = a->counters();
        PruneSetup s3 = s;
        s3.stage = 0;  // reduces at the boundary like stage 1: the same bits (zero_stage.cpp)
        MemoryPool pool3;
        auto b = make_engine(pool3, s3, &c);
        UpdateState& sb = b->update_state();
        const int64_t lo = b->data_parallel().update_range().lo;
        for (size_t k = 0; k < whole.size(); ++k)
            sb.write(static_cast<int>(k), 0, sb.numel(), whole[k].data() + lo);
        b->restore(counters);
        EXPECT_EQ(b->pruner()->sparsity(), a->pruner()->sparsity());
        train_steps(*b, s3, c.rank(), 6, kSteps, &resumed);
    });
    EXPECT_EQ(resumed.loss, std::vector<double>(full.loss.begin() + 6, full.loss.end()));
    EXPECT_EQ(resumed.weights.back(), full.weights.back());
}

}  // namespace
}  // namespace zt
