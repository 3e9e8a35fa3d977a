// Pipeline parallelism (runtime/pipeline_runner.h) under the equivalence rule (DESIGN.md): a GPT
// cut into p stages, with each schedule, alone or on every dp x tp x pp mesh of up to 4 ranks
// (tp with and without sequence parallelism) with ZeRO stage 0 or 1, trains like one process
// with the same samples per step: the same initial weights to the bit, and the same loss and
// gradient-norm trajectory over 20 steps within DESIGN's fp32 tolerance (the largest difference
// seen is printed; docs/pipeline-parallel.md lists them). Also: each stage runs exactly its
// schedule's ops in order, 1F1B holds at most p micro-batches' activations (interleaved within
// Megatron-LM's warm-up), and a stage that skips a send is reported by the pipeline watchdog.
// Ranks are threads (local backend); tests/cli/pipeline_cli_test.cpp runs the trainer under
// mpirun.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <mutex>

#include "comm/local/local_comm.h"
#include "data/tokens/token_dataset.h"
#include "models/gpt/gpt.h"
#include "models/gpt/gpt_family.h"
#include "optim/adamw.h"
#include "parallel/tensor_parallel_weights.h"
#include "runtime/pipeline_runner.h"
#include "runtime/run_mesh.h"
#include "tensor/threads.h"
#include "util/random.h"

namespace zt {
namespace {

constexpr int64_t kV = 48, kT = 8, kMicro = 2;

struct Layout {
    int dp = 1, tp = 1, pp = 1;
    bool sequence_parallel = false;  // with tp 2: LayerNorm and residual rows split over tp
    int64_t layers = 4;
    PipeSchedule schedule = PipeSchedule::kOneFOneB;
    int virtual_stages = 1;
    int64_t micro_batches = 4;  // per step on each dp rank (gradient accumulation)
    int zero = 0;
    DType compute = DType::kF32;
    std::string checkpointing = "none";
    std::vector<BlockRecompute> blocks = {};  // checkpointing "blocks"
    int64_t steps = 20;
    double clip = 0.5;
    std::vector<int64_t> partition;  // empty: even
    double timeout_s = 60;
    int skip_stage = -1, skip_micro = -1;
};

struct PpRun {
    std::vector<double> loss, grad_norm;
    std::map<std::string, std::vector<float>> init;        // world rank 0's parameters, whole
    std::vector<std::vector<PipeOp>> executed, scheduled;  // per stage, the first step
    std::vector<int> peak_in_flight;                       // per stage
    std::vector<double> bubble;
    std::vector<std::string> errors;  // per world rank
    bool tied_in_sync = true;         // the first and last stage's wte, bit for bit
};

int32_t token(int64_t sample, int64_t t) {
    int64_t x = static_cast<int64_t>(uniform01(11, static_cast<uint64_t>(sample), 0) * kV);
    for (int64_t i = 0; i < t; ++i) x = (5 * x + 3) % kV;
    return static_cast<int32_t>(x);
}

std::vector<int64_t> partition_of(const Layout& l) {
    if (!l.partition.empty()) return l.partition;
    const int64_t n = static_cast<int64_t>(l.pp) * l.virtual_stages;
    std::vector<int64_t> c(static_cast<size_t>(n), l.layers / n);
    for (int64_t k = 0; k < l.layers % n; ++k) ++c[static_cast<size_t>(k)];
    return c;
}

void train_rank(const Layout& l, Communicator& world, PpRun* out, std::mutex* mu) {
    set_num_threads(1);
    MeshOptions mo;
    mo.sequence_parallel = l.sequence_parallel;
    RunMesh mesh = split_run_mesh(&world, l.tp, l.pp, mo);
    GptOptions go{kV, kT, 16, l.layers, 4};
    go.checkpoint_policy = l.checkpointing;
    go.checkpoint_blocks = l.blocks;
    go.tp = mesh.tp;
    const PipeOptions po{l.pp, static_cast<int>(l.micro_batches), l.virtual_stages, l.schedule};
    if (l.pp > 1) go.pipe = pipe_stage(po, partition_of(l), mesh.coord.pp);
    EngineOptions eo;
    eo.compute_dtype = l.compute;
    eo.gradient_clipping = l.clip;
    eo.grad_accum = l.micro_batches;
    eo.lr = 3e-3;
    eo.seed = 5;
    AdamWOptions ao;
    ao.weight_decay = 0.1;
    eo.optimizer = std::make_unique<AdamW>(ao);
    eo.comm = mesh.dp;
    eo.tp = mesh.tp;
    eo.pp = mesh.pp;
    eo.tied = mesh.tied;
    eo.zero.stage = l.zero;
    eo.zero.reduce_bucket_size = 700;
    eo.zero.allgather_bucket_size = 1000;
    MemoryPool pool;
    Engine e(pool, std::make_unique<Gpt>(go), std::move(eo));
    const bool root = world.rank() == 0;
    {  // the estimator's count for this stage (planner: param_count_stage) is the arena's
        const GptFamily family(GptOptions{kV, kT, 16, l.layers, 4}, GptDataOptions{});
        const PipeStage stage = l.pp > 1 ? go.pipe : PipeStage{};
        EXPECT_EQ(e.arena().numel(), family.param_count_stage(l.tp, stage));
        // and its list of the parameters (param_numels, for the reduce buckets) the arena's
        std::vector<int64_t> built;
        for (const Parameter* p : e.arena().params()) built.push_back(p->numel());
        EXPECT_EQ(family.param_numels(l.tp, stage), built);
    }
    {
        std::vector<float> w = tp_assemble(e.arena().params(), e.gather_master().data(), mesh.tp);
        int64_t at = 0;
        for (const Parameter* p : e.arena().params()) {
            const int64_t n = shape_numel(p->global_shape());
            if (root) out->init[p->name].assign(w.begin() + at, w.begin() + at + n);
            at += n;
        }
    }
    std::unique_ptr<PipelineRunner> runner;
    if (l.pp > 1) {
        PipelineRunOptions ro;
        ro.pipe = po;
        ro.timeout_s = l.timeout_s;
        ro.skip_send_stage = l.skip_stage;
        ro.skip_send_micro = l.skip_micro;
        runner = std::make_unique<PipelineRunner>(e, mesh.pp, ro);
    }
    const int dp_rank = mesh.coord.dp;
    std::vector<std::vector<int32_t>> in(static_cast<size_t>(l.micro_batches)),
        tg(static_cast<size_t>(l.micro_batches));
    try {
        for (int64_t step = 0; step < l.steps; ++step) {
            std::vector<Batch> batches;
            for (int64_t m = 0; m < l.micro_batches; ++m) {
                auto& x = in[static_cast<size_t>(m)];
                auto& y = tg[static_cast<size_t>(m)];
                x.resize(kMicro * kT);
                y.resize(kMicro * kT);
                for (int64_t j = 0; j < kMicro; ++j) {
                    const int64_t k =
                        global_sample_index(step, m, dp_rank, kMicro, l.micro_batches, l.dp, j);
                    for (int64_t t = 0; t < kT; ++t) {
                        x[j * kT + t] = token(k, t);
                        y[j * kT + t] = token(k, t + 1);
                    }
                }
                batches.push_back(Batch{x, y, kMicro, kT});
            }
            if (runner) {
                runner->run(batches);
            } else {
                for (const Batch& b : batches) e.forward_backward(b);
            }
            if (runner && step == 0 && mesh.coord.dp == 0 && mesh.coord.tp == 0) {
                std::lock_guard lock(*mu);
                out->executed[static_cast<size_t>(mesh.coord.pp)] = runner->executed();
                out->scheduled[static_cast<size_t>(mesh.coord.pp)] = runner->schedule();
                out->peak_in_flight[static_cast<size_t>(mesh.coord.pp)] =
                    runner->stats().peak_in_flight;
            }
            if (runner && root) out->bubble.push_back(runner->stats().bubble);
            StepStats st = e.step();
            if (root) {
                out->loss.push_back(st.loss);
                out->grad_norm.push_back(st.grad_norm);
            }
        }
        if (runner) runner->close();
    } catch (const Error& err) {
        std::lock_guard lock(*mu);
        out->errors[static_cast<size_t>(world.rank())] = err.message();
        return;
    }
    // The tied embedding's two copies (first and last stage) are the same to the bit.
    if (mesh.tied && l.zero == 0) {  // stage 0: master weights held whole
        const std::vector<Parameter*>& tied = e.tied_parameters();
        ASSERT_EQ(tied.size(), 1u);
        std::vector<float> mine = tied[0]->master.to_vector(), first = mine;
        mesh.tied->broadcast(first.data(), static_cast<int64_t>(first.size()), CommType::kF32, 0)
            ->wait();
        std::lock_guard lock(*mu);
        if (mine != first) out->tied_in_sync = false;
    }
}

PpRun train(const Layout& l) {
    PpRun r;
    r.executed.resize(static_cast<size_t>(l.pp));
    r.scheduled.resize(static_cast<size_t>(l.pp));
    r.peak_in_flight.assign(static_cast<size_t>(l.pp), 0);
    r.errors.resize(static_cast<size_t>(l.dp * l.tp * l.pp));
    std::mutex mu;
    run_local_ranks(l.dp * l.tp * l.pp, [&](Communicator& c) { train_rank(l, c, &r, &mu); });
    return r;
}

double max_rel(const std::vector<double>& a, const std::vector<double>& b) {
    double m = 0;
    for (size_t i = 0; i < a.size(); ++i)
        m = std::max(m, std::abs(a[i] - b[i]) / std::max(std::abs(b[i]), 1e-12));
    return m;
}

// l against one process with dp times the accumulation (the same samples per step).
void expect_equivalent(const Layout& l, double tol = 1e-4) {
    Layout one = l;
    one.dp = one.tp = one.pp = 1;
    one.sequence_parallel = false;
    one.zero = 0;
    one.virtual_stages = 1;
    one.schedule = PipeSchedule::kOneFOneB;
    one.partition.clear();
    one.micro_batches = l.micro_batches * l.dp;
    const PpRun ref = train(one), got = train(l);
    for (const std::string& e : got.errors) EXPECT_EQ(e, "");
    ASSERT_EQ(got.loss.size(), ref.loss.size());
    for (const auto& [name, values] : got.init) {  // the first stage's, against the whole's
        ASSERT_TRUE(ref.init.count(name)) << name;
        EXPECT_EQ(values, ref.init.at(name)) << name << ": initial weights depend on the layout";
    }
    const double dl = max_rel(got.loss, ref.loss), dn = max_rel(got.grad_norm, ref.grad_norm);
    std::printf(
        "dp %d x tp %d%s x pp %d %s v%d m%lld L%lld zero %d %s: loss %.2e, grad norm %.2e\n", l.dp,
        l.tp, l.sequence_parallel ? " sp" : "", l.pp, pipe_schedule_name(l.schedule),
        l.virtual_stages, static_cast<long long>(l.micro_batches), static_cast<long long>(l.layers),
        l.zero, dtype_name(l.compute), dl, dn);
    EXPECT_LE(dl, tol);
    EXPECT_LE(dn, 10 * tol);
    EXPECT_TRUE(got.tied_in_sync) << "the tied embedding's copies drifted apart";
    EXPECT_LT(ref.loss.back(), ref.loss.front() - 0.3) << "the reference does not learn";
}

constexpr PipeSchedule kSchedules[] = {PipeSchedule::kGpipe, PipeSchedule::kOneFOneB,
                                       PipeSchedule::kInterleaved, PipeSchedule::kZeroBubble};

// l with schedule s. Interleaved takes 2 chunks per stage on the smallest model it runs:
// blocks a multiple of p v and micro-batches a multiple of p (validate_pipe's rules).
Layout scheduled(Layout l, PipeSchedule s) {
    l.schedule = s;
    if (s == PipeSchedule::kInterleaved) {
        l.virtual_stages = 2;
        const int64_t pieces = static_cast<int64_t>(l.pp) * l.virtual_stages;
        l.layers = (l.layers + pieces - 1) / pieces * pieces;
        l.micro_batches = (l.micro_batches + l.pp - 1) / l.pp * l.pp;
    }
    return l;
}

TEST(PipelineParallel, EveryScheduleOnTwoStagesTrainsLikeOneProcess) {
    for (PipeSchedule s : kSchedules) {
        Layout l;
        l.pp = 2;
        expect_equivalent(scheduled(l, s));
    }
}

// Interleaved with uneven pieces (an explicit partition; the head's piece smaller).
TEST(PipelineParallel, InterleavedWithUnevenPiecesTrainsLikeOneProcess) {
    Layout l;
    l.pp = 2;
    l.layers = 8;
    l.schedule = PipeSchedule::kInterleaved;
    l.virtual_stages = 2;
    l.partition = {3, 2, 2, 1};
    expect_equivalent(l);
}

TEST(PipelineParallel, FourStagesAndUnevenStagesTrainLikeOneProcess) {
    for (PipeSchedule s : kSchedules) {  // interleaved: 8 blocks, one per virtual stage
        Layout l;
        l.pp = 4;
        expect_equivalent(scheduled(l, s));
    }
    Layout l;
    l.pp = 2;
    l.partition = {3, 1};
    l.micro_batches = 3;
    expect_equivalent(l);
}

// Every 4-rank mesh with a pipeline and each schedule: dp 2 x pp 2 (ZeRO stage 0 and 1) and
// tp 2 x pp 2, with and without sequence parallelism.
TEST(PipelineParallel, MeshesWithDataAndTensorParallelismTrainLikeOneProcess) {
    for (PipeSchedule s : kSchedules) {
        for (int zero : {0, 1}) {
            Layout l;
            l.dp = 2;
            l.pp = 2;
            l.zero = zero;
            expect_equivalent(scheduled(l, s));
        }
        for (bool sp : {false, true}) {
            Layout l;
            l.tp = 2;
            l.pp = 2;
            l.sequence_parallel = sp;
            expect_equivalent(scheduled(l, s));
        }
    }
    Layout c;  // activation checkpointing per stage
    c.pp = 2;
    c.checkpointing = "every";
    c.schedule = PipeSchedule::kZeroBubble;
    expect_equivalent(c);
    Layout b;  // a per-block list, as the planner gives a 1F1B pipeline (more on stage 0)
    b.pp = 2;
    b.checkpointing = "blocks";
    b.blocks = {BlockRecompute::kFull, BlockRecompute::kSelective, BlockRecompute::kNone,
                BlockRecompute::kNone};
    expect_equivalent(b);
}

// Half precision: bf16 within DESIGN's bf16 tolerance; fp16 with one loss scale for all stages
// (the overflow check is the global norm, summed over the stages).
TEST(PipelineParallel, HalfPrecisionTrainsLikeOneProcess) {
    Layout l;
    l.pp = 2;
    l.compute = DType::kBF16;
    expect_equivalent(l, 1e-2);
    l.compute = DType::kF16;
    l.schedule = PipeSchedule::kZeroBubble;
    expect_equivalent(l, 1e-2);
}

// The most (micro-batch, chunk) pairs a stage's op list holds alive at once: forward done,
// backward (B) not yet.
int peak_alive(const std::vector<PipeOp>& ops) {
    int alive = 0, peak = 0;
    for (const PipeOp& op : ops) {
        if (op.kind == PipeOpKind::kForward) peak = std::max(peak, ++alive);
        if (op.kind == PipeOpKind::kBackward) --alive;
    }
    return peak;
}

TEST(PipelineParallel, StagesRunTheirScheduleInOrderWithinTheMemoryBound) {
    for (PipeSchedule s : kSchedules) {
        Layout l;
        l.pp = 4;
        l.micro_batches = 6;
        l.steps = 1;
        l = scheduled(l, s);  // interleaved: v 2, 8 blocks, m 8
        const PpRun r = train(l);
        const std::vector<std::vector<PipeOp>> want =
            pipe_schedule({l.pp, static_cast<int>(l.micro_batches), l.virtual_stages, l.schedule});
        for (int st = 0; st < l.pp; ++st) {
            const auto i = static_cast<size_t>(st);
            EXPECT_EQ(r.executed[i], want[i]) << pipe_schedule_name(s) << " stage " << st;
            if (s == PipeSchedule::kGpipe) {
                EXPECT_EQ(r.peak_in_flight[i], l.micro_batches);
            } else if (s == PipeSchedule::kInterleaved) {
                // Megatron-LM's warm-up, 2 (p - s - 1) + (v - 1) p chunks, then one more in
                // the steady state: fewer than GPipe's v m
                const int bound = 2 * (l.pp - st - 1) + (l.virtual_stages - 1) * l.pp + 1;
                EXPECT_EQ(r.peak_in_flight[i], peak_alive(want[i])) << "stage " << st;
                EXPECT_LE(r.peak_in_flight[i], bound) << "stage " << st;
                EXPECT_LT(r.peak_in_flight[i], l.virtual_stages * l.micro_batches);
            } else {  // 1F1B's bound: at most p - s micro-batches alive on stage s
                EXPECT_EQ(r.peak_in_flight[i], std::min<int>(l.pp - st, l.micro_batches))
                    << pipe_schedule_name(s) << " stage " << st;
            }
        }
    }
}

TEST(PipelineParallel, AStageThatSkipsASendIsReportedByTheWatchdog) {
    Layout l;
    l.pp = 2;
    l.steps = 1;
    l.timeout_s = 1;
    l.skip_stage = 0;
    l.skip_micro = 1;
    const PpRun r = train(l);
    ASSERT_EQ(r.errors.size(), 2u);
    // Both stages wait; whichever watchdog fires first (a race between the threads) reports,
    // and the other stage then fails on its own timeout or on seeing its peer end.
    auto has = [](const std::string& e, const char* s) { return e.find(s) != std::string::npos; };
    const std::string& e1 = r.errors[1];
    const std::string& e0 = r.errors[0];
    if (has(e1, "pipeline watchdog:")) {
        EXPECT_TRUE(has(e1,
                        "pipeline watchdog: stage 1 (forward of micro-batch 1) waits for the "
                        "activations of micro-batch 1 from stage 0"))
            << e1;
        EXPECT_TRUE(has(e1, "stage 0 sends them in op 2 of 8 (forward of micro-batch 1)")) << e1;
        // What stage 0 is doing, asked over the status channel: waiting itself, for stage 1.
        EXPECT_TRUE(has(e1,
                        "stage 0 is in backward of micro-batch 1, waiting for the gradients "
                        "of micro-batch 1 from stage 1"))
            << e1;
    } else {
        EXPECT_TRUE(has(e0,
                        "pipeline watchdog: stage 0 (backward of micro-batch 1) waits for the "
                        "gradients of micro-batch 1 from stage 1"))
            << e0 << "\n"
            << e1;
        EXPECT_TRUE(has(e0,
                        "stage 1 is in forward of micro-batch 1, waiting for the activations "
                        "of micro-batch 1 from stage 0"))
            << e0;
    }
    EXPECT_FALSE(e0.empty());
    EXPECT_FALSE(e1.empty());
}

}  // namespace
}  // namespace zt
