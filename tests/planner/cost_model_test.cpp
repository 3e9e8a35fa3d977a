// The cost model against its own formulas (Note [Step time model]) and against estimate.h:
// memory of a layout is the estimator's for the layout's parameter count, ranks and stage;
// times are work over the synthetic profile's round rates.
#include "planner/cost_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "parallel/pipeline_partition.h"
#include "planner/calibrate.h"
#include "planner/profile.h"
#include "planner_test_util.h"
#include "tensor/threads.h"

namespace zt {
namespace {

using testing::round_profile;
using testing::tiny_gpt_base;

TEST(CostModel, StateMemoryIsTheEstimators) {
    const PlanBase base = tiny_gpt_base();
    for (int dp : {1, 2, 3})
        for (int stage : {0, 1, 2, 3}) {
            Strategy s;
            s.dp = dp;
            s.zero_stage = stage;
            s.micro_batch = 8 / 2;
            s.grad_accum = 2;
            const Estimate e = plan_memory(base, s);
            StateSpec st = base.spec.state;
            st.param_count = base.spec.model->param_count();
            st.ranks = dp;
            st.zero_stage = stage;
            const StateEstimate want = estimate_state(st);
            for (MemCategory c :
                 {MemCategory::kParams, MemCategory::kGrads, MemCategory::kOptimizer})
                EXPECT_EQ(e.device[static_cast<int>(c)], want.device[static_cast<int>(c)])
                    << "dp " << dp << " stage " << stage << " " << mem_category_name(c);
        }
}

TEST(CostModel, TensorAndPipelineSplitTheParameters) {
    const PlanBase base = tiny_gpt_base();
    const ModelFamily& m = *base.spec.model;
    Strategy s;
    s.tp = 2;
    s.micro_batch = 8;
    EXPECT_EQ(plan_memory(base, s).state.padded_numel, m.param_count_split(2));
    s.tp = 1;
    s.pp = 2;
    s.grad_accum = 4;
    s.micro_batch = 2;
    const PipeOptions o{2, 4, 1, PipeSchedule::kOneFOneB};
    const std::vector<int64_t> counts = balanced_partition(o, m.pipeline_costs());
    const int64_t most = std::max(m.param_count_stage(1, pipe_stage(o, counts, 0)),
                                  m.param_count_stage(1, pipe_stage(o, counts, 1)));
    EXPECT_EQ(plan_memory(base, s).state.padded_numel, most);
}

TEST(CostModel, PipelineActivationsGrowWithMicroBatchesInFlight) {
    const PlanBase base = tiny_gpt_base(16);
    Strategy s;
    s.pp = 2;
    s.micro_batch = 2;
    s.grad_accum = 8;
    s.schedule = PipeSchedule::kGpipe;
    const int64_t gpipe = plan_memory_of_stage(base, s, 0).activations.saved;
    s.schedule = PipeSchedule::kOneFOneB;
    const int64_t one_f_one_b = plan_memory_of_stage(base, s, 0).activations.saved;
    // GPipe keeps all 8 micro-batches' activations of the first stage, 1F1B at most 2.
    EXPECT_NEAR(static_cast<double>(gpipe) / static_cast<double>(one_f_one_b), 4.0, 1e-3);
}

// Note [A stage's own activations]: with the family's bytes by block, a stage holds its own
// blocks' saved bytes, the embeddings' on the first and the head's on the last, per micro-batch
// in flight, and its backward goes past them by the head's transient on the last stage only.
TEST(CostModel, PipelineStagesHoldTheirOwnBlocksEmbeddingsAndHead) {
    const PlanBase base = tiny_gpt_base(16);
    Strategy s;
    s.pp = 2;
    s.micro_batch = 2;
    s.grad_accum = 4;
    s.schedule = PipeSchedule::kGpipe;  // every micro-batch in flight on both stages
    s.partition = {3, 1};               // the head's stage with one block
    const ModelFamily& m = *base.spec.model;
    const std::optional<BlockMemoryModel> mm = m.block_memory(2, DType::kF32, 1, false);
    ASSERT_TRUE(mm);
    const size_t none = BlockMemoryModel::index(BlockRecompute::kNone);
    const PipeOptions o{2, 4, 1, PipeSchedule::kGpipe};
    double want_saved = 0, want_peak = 0;
    for (int k = 0; k < 2; ++k) {
        const PipeStage ps = pipe_stage(o, s.partition, k);
        ASSERT_EQ(ps.chunks.size(), 1u);
        double own = k == 0 ? static_cast<double>(mm->below) : static_cast<double>(mm->head_saved);
        double block_transient = 0;
        for (int64_t l = ps.chunks[0].lo; l < ps.chunks[0].hi; ++l) {
            const BlockBytes& b = mm->blocks[static_cast<size_t>(l)][none];
            own += static_cast<double>(b.saved);
            block_transient = std::max(block_transient, static_cast<double>(b.backward - b.saved));
        }
        const Estimate e = plan_memory_of_stage(base, s, k);
        Strategy one = s;  // the whole model's one micro-batch: its backward's transient
        one.pp = 1;
        one.partition.clear();
        const PolicyActivations whole = plan_memory(base, one).activations;
        const double whole_transient = static_cast<double>(whole.peak - whole.saved);
        const double transient =
            k == 1 ? whole_transient : std::min(whole_transient, block_transient);
        EXPECT_NEAR(static_cast<double>(e.activations.saved), 4 * own, 1.0) << k;
        EXPECT_NEAR(static_cast<double>(e.activations.peak), 4 * own + transient, 1.0) << k;
        want_saved = std::max(want_saved, 4 * own);
        want_peak = std::max(want_peak, 4 * own + transient);
    }
    EXPECT_NEAR(static_cast<double>(plan_memory(base, s).activations.saved), want_saved, 1.0);
    EXPECT_NEAR(static_cast<double>(plan_memory(base, s).activations.peak), want_peak, 1.0);
}

TEST(CostModel, DataParallelCommFollowsTheZeroStage) {
    const PlanBase base = tiny_gpt_base();
    const MachineProfile prof = round_profile();
    Strategy s;
    s.dp = 2;
    s.micro_batch = 2;
    s.grad_accum = 2;
    const double P = static_cast<double>(plan_memory(base, s).state.padded_numel);
    const double lat = 1e-5, bw = 1e9, g = 4, e = 4;
    s.zero_stage = 0;
    EXPECT_NEAR(plan_cost(base, s, &prof).time.dp_comm, lat + 2.0 * 1 / 2 * P * g / bw, 1e-12);
    s.zero_stage = 1;
    EXPECT_NEAR(plan_cost(base, s, &prof).time.dp_comm, 2 * lat + 0.5 * P * (g + e) / bw, 1e-12);
    s.zero_stage = 2;  // a reduce-scatter per micro-step
    EXPECT_NEAR(plan_cost(base, s, &prof).time.dp_comm, 3 * lat + 0.5 * P * (2 * g + e) / bw,
                1e-12);
}

// Note [Collectives at the run's rank count]: a profile with local fits at 2 and 4 ranks costs
// each layout with the fit measured nearest its rank count.
TEST(CostModel, CollectivesCostedWithTheFitNearestTheRankCount) {
    MachineProfile prof = round_profile();
    CommProfile four = prof.comm[0];
    four.ranks = 4;
    four.all_reduce = {1e-3, 1e8, {}};
    prof.comm.push_back(four);
    CommProfile mpi = prof.comm[0];
    mpi.backend = "mpi";
    mpi.ranks = 8;
    prof.comm.push_back(mpi);
    EXPECT_EQ(prof.comm_for("local", 2)->ranks, 2);
    EXPECT_EQ(prof.comm_for("local", 1)->ranks, 2);
    EXPECT_EQ(prof.comm_for("local", 3)->ranks, 4);  // |log 4/3| < |log 2/3|
    EXPECT_EQ(prof.comm_for("local", 64)->ranks, 4);
    EXPECT_EQ(prof.comm_for("local", 0)->ranks, 2);  // no count: the backend's first
    EXPECT_EQ(prof.comm_for("mpi", 2)->backend, "mpi");
    EXPECT_EQ(prof.comm_for("nccl", 4), &prof.comm.front());  // not measured: the first
    MachineProfile tie = round_profile();
    CommProfile eight = tie.comm[0];
    eight.ranks = 8;
    tie.comm.push_back(eight);
    EXPECT_EQ(tie.comm_for("local", 4)->ranks, 8);  // 2 and 8 as near as each other: the larger

    const PlanBase base = tiny_gpt_base();
    Strategy s;
    s.micro_batch = 2;
    s.grad_accum = 1;
    s.zero_stage = 0;
    for (int dp : {2, 4}) {
        s.dp = dp;
        const PlanCost c = plan_cost(base, s, &prof);
        const double P = static_cast<double>(c.memory.state.padded_numel);
        const double rb = std::max(
            1.0, std::ceil(P / static_cast<double>(c.memory.spec.state.reduce_bucket_numel)));
        const CollectiveFit& fit = dp == 2 ? prof.comm[0].all_reduce : four.all_reduce;
        EXPECT_NEAR(c.time.dp_comm, rb * fit.time_s(4 * P / rb, all_reduce_bus_factor(dp)), 1e-12)
            << dp;
    }
}

// Note [Rendezvous on shared cores]: with more rank threads than cores each collective call adds
// the profile's rendezvous_s: ZeRO-0 its buckets and the step's scalars, ZeRO-3 a gather per
// large weight forward and backward besides; with a core per rank, nothing.
TEST(CostModel, CollectiveCallsOnSharedCoresPayTheRendezvous) {
    PlanBase base = tiny_gpt_base();
    // wte (2,048) and each block's four weight matrices (1,024 to 4,096) are gathered; wpe,
    // biases and norms stay whole.
    base.spec.state.persistence_threshold = 1000;
    MachineProfile prof = round_profile();
    prof.comm[0].ranks = 4;
    Strategy s;
    s.dp = 4;
    s.micro_batch = 2;
    s.grad_accum = 1;
    const auto dp_comm = [&](int stage, double rv, int cores) {
        prof.comm[0].rendezvous_s = rv;
        base.cores = cores;
        s.zero_stage = stage;
        return plan_cost(base, s, &prof).time.dp_comm;
    };
    const PlanCost c = plan_cost(base, s, &prof);
    const double rb =
        std::max(1.0, std::ceil(static_cast<double>(c.memory.state.padded_numel) /
                                static_cast<double>(c.memory.spec.state.reduce_bucket_numel)));
    const double units = static_cast<double>(c.memory.spec.state.buckets.gathered_params);
    EXPECT_EQ(units, 1 + 4 * 4);
    const double rv = 1e-3;
    EXPECT_NEAR(dp_comm(0, rv, 2) - dp_comm(0, 0, 2), (rb + 1) * rv, 1e-12);
    EXPECT_NEAR(dp_comm(3, rv, 2) - dp_comm(3, 0, 2), (rb + 2 * units + 1) * rv, 1e-12);
    EXPECT_EQ(dp_comm(3, rv, 4), dp_comm(3, 0, 4));  // a core per rank
    // Profiles before session 29 have no rendezvous: -1, not measured, costed as none.
    nlohmann::json j = profile_json(prof);
    j["comm"][0].erase("rendezvous_s");
    EXPECT_EQ(profile_from_json(j, "p.json").comm[0].rendezvous_s, -1.0);
    prof.comm[0].rendezvous_s = -1;
    EXPECT_EQ(dp_comm(3, -1, 2), dp_comm(3, 0, 2));
    prof.comm[0].rendezvous_s = 2.5e-4;
    EXPECT_EQ(profile_from_json(profile_json(prof), "p.json").comm[0].rendezvous_s, 2.5e-4);
}

TEST(CostModel, ComputeIsWorkOverRates) {
    const PlanBase base = tiny_gpt_base();
    const MachineProfile prof = round_profile();
    Strategy s;
    s.micro_batch = 4;
    s.grad_accum = 2;
    const PlanCost c = plan_cost(base, s, &prof);
    const ModelFamily& m = *base.spec.model;
    const double L = 4, T = 16, C = 32, b = 4;
    const double attn = 12 * L * T * T * C * b;
    const double gemm = m.flops_per_sample() * b - attn;
    // b T C C = 4 x 16 x 32 x 32 x 2 = 131072 FLOPs per product: the small class (1 GFLOP/s).
    int64_t none_saved = 0;
    for (const PolicyActivations& p : c.memory.policies)
        if (p.policy == "none") none_saved = p.saved;
    const double want = 2 * (gemm / 1e9 + attn / 5e8 + 4.0 * none_saved / 1e10);
    EXPECT_NEAR(c.time.compute, want, want * 1e-12);
    EXPECT_EQ(c.time.recompute, 0);
    // "every": each block's forward but its MLP down projection (Note [Recompute cost]): 16 T C^2
    // of products and 4 T^2 C of attention core per block and sample.
    s.checkpoint = "every";
    const double block = 16 * T * C * C * b / 1e9 + 4 * T * T * C * b / 5e8;
    EXPECT_NEAR(plan_cost(base, s, &prof).time.recompute, 2 * L * block, want * 1e-12);
    s.checkpoint = "selective";  // c_attn (6 T C^2) and the attention core, in every block
    EXPECT_NEAR(plan_cost(base, s, &prof).time.recompute,
                2 * L * (6 * T * C * C * b / 1e9 + 4 * T * T * C * b / 5e8), want * 1e-12);
    // every_k = 3 over 4 blocks: blocks 0 and 3.
    PlanBase every3 = base;
    GptOptions o3{64, 16, 32, 4, 4};
    o3.checkpoint_every_k = 3;
    every3.spec.model = std::make_shared<GptFamily>(o3, GptDataOptions{});
    s.checkpoint = "every_k";
    EXPECT_NEAR(plan_cost(every3, s, &prof).time.recompute, 2 * 2 * block, want * 1e-12);
    s.checkpoint = "every";
    // The fixed cost of the ops: 3 per parameter tensor per micro-batch.
    PlanBase with_ops = base;
    with_ops.param_tensors = 10;
    MachineProfile slow_ops = prof;
    slow_ops.rates[0].op_overhead_s = 1e-5;
    EXPECT_NEAR(plan_cost(with_ops, s, &slow_ops).time.compute, want + 2 * 30 * 1e-5, want * 1e-12);
    // Adam: 7 f32 accesses per element of the whole arena at stage 0.
    const double P = static_cast<double>(c.memory.state.padded_numel);
    EXPECT_NEAR(c.time.optimizer, 28 * P / 1e10, 1e-15);
}

// Note [Team wakes]: past the engine's grain a micro-batch pays 3 region starts per parameter
// tensor; below it the passes run on one thread at one thread's bandwidth; unmeasured, neither.
TEST(CostModel, TeamRegionsChargedPerMicroBatchPastTheGrain) {
    PlanBase base = tiny_gpt_base(8);
    base.threads = 4;
    base.param_tensors = 10;
    const MachineProfile unmeasured = round_profile();
    MachineProfile team = unmeasured;
    team.rates[1].team_region_s = 1e-4;
    team.rates[1].team_min_elems = 2000;  // a pass is b x 16 x 32 = 512 b elements
    Strategy big;
    big.micro_batch = 8;  // 4096 elements: on the team
    big.grad_accum = 1;
    EXPECT_NEAR(plan_cost(base, big, &team).time.compute,
                plan_cost(base, big, &unmeasured).time.compute + 3 * 10 * 1e-4, 1e-12);
    Strategy small = big;
    small.micro_batch = 2;  // 1024 elements: one thread, no region
    small.grad_accum = 4;
    MachineProfile one_thread_bw = unmeasured;
    one_thread_bw.rates[1].elementwise_bytes_per_s = one_thread_bw.rates[0].elementwise_bytes_per_s;
    EXPECT_NEAR(plan_cost(base, small, &team).time.compute,
                plan_cost(base, small, &one_thread_bw).time.compute, 1e-12);
    EXPECT_GT(plan_cost(base, small, &team).time.compute,
              plan_cost(base, small, &unmeasured).time.compute);
    // One thread opens no region.
    base.threads = 1;
    EXPECT_EQ(plan_cost(base, big, &team).time.compute,
              plan_cost(base, big, &unmeasured).time.compute);
}

// Note [Copies on busy cores]: the local backend's overlapped communication is hidden only where
// the ranks leave a core free for its copies.
TEST(CostModel, LocalCopiesHideOnlyBehindFreeCores) {
    PlanBase base = tiny_gpt_base();  // 4 cores, one thread a rank
    const MachineProfile prof = round_profile();
    Strategy s;
    s.dp = 2;
    s.zero_stage = 3;  // overlap_comm on by default: gathers and reductions behind compute
    s.micro_batch = 4;
    s.grad_accum = 2;
    const PlanCost free_cores = plan_cost(base, s, &prof);
    ASSERT_GT(free_cores.time.comm_overlapped(), 0);
    base.cores = 2;  // two one-thread ranks fill both
    const PlanCost busy = plan_cost(base, s, &prof);
    EXPECT_EQ(busy.time.comm_overlapped(), 0);
    EXPECT_NEAR(busy.time.comm_exposed(), free_cores.time.comm_all(), 1e-12);
    base.backend = "mpi";  // its transfers are not the ranks' copies here: hidden as before
    MachineProfile with_mpi = prof;
    with_mpi.comm.push_back(prof.comm[0]);
    with_mpi.comm.back().backend = "mpi";
    EXPECT_NEAR(plan_cost(base, s, &with_mpi).time.comm_overlapped(),
                free_cores.time.comm_overlapped(), 1e-12);
}

// Note [Elementwise bytes of a tensor-parallel rank]: a tp rank's products and attention are its
// t-th of the model's; its elementwise bytes are its own activations (the split widths' share and
// the replicated LayerNorms, residuals and biases whole), not a t-th of them again.
TEST(CostModel, TensorParallelRanksMoveTheirOwnActivations) {
    const PlanBase base = tiny_gpt_base();
    const MachineProfile prof = round_profile();
    Strategy s;
    s.micro_batch = 4;
    s.grad_accum = 2;
    const int64_t whole = [&] {
        for (const PolicyActivations& p : plan_cost(base, s, &prof).memory.policies)
            if (p.policy == "none") return p.saved;
        return int64_t{0};
    }();
    s.tp = 2;
    const PlanCost c = plan_cost(base, s, &prof);
    int64_t mine = 0;
    for (const PolicyActivations& p : c.memory.policies)
        if (p.policy == "none") mine = p.saved;
    EXPECT_GT(mine, whole / 2);  // the replicated tensors: more than half of one process's
    EXPECT_LT(mine, whole);
    const ModelFamily& m = *base.spec.model;
    const double L = 4, T = 16, C = 32, b = 4;
    const double attn = 12 * L * T * T * C * b;
    const double gemm = m.flops_per_sample() * b - attn;
    // b T C C / 2 = 65536 FLOPs per product: the small class (1 GFLOP/s); two ranks of one thread
    // on four cores, the bus at its one-thread 10 GB/s.
    const double want = 2 * (gemm / 2 / 1e9 + attn / 2 / 5e8 + 4.0 * mine / 1e10);
    EXPECT_NEAR(c.time.compute, want, want * 1e-12);
}

// The schedule simulated on the balanced pieces, each scaled by its cost: span over the busiest
// rank's compute, minus 1.
double simulated_idle(const PlanBase& base, const PipeOptions& o) {
    const PipeCosts costs = base.spec.model->pipeline_costs();
    const std::vector<double> pieces = piece_costs(balanced_partition(o, costs), costs);
    const bool zb = o.schedule == PipeSchedule::kZeroBubble;
    const PipeTimeline t =
        simulate_pipe(o, pipe_schedule(o), 1.0, zb ? 1.0 : 2.0, zb ? 1.0 : 0.0, pieces);
    return t.makespan / *std::max_element(t.busy.begin(), t.busy.end()) - 1.0;
}

TEST(CostModel, PipelineBubbleIsTheScheduleSimulatedOnItsPieces) {
    const PlanBase base = tiny_gpt_base(16);
    const MachineProfile prof = round_profile();
    Strategy s;
    s.pp = 2;
    s.micro_batch = 2;
    s.grad_accum = 8;
    for (PipeSchedule sch :
         {PipeSchedule::kOneFOneB, PipeSchedule::kZeroBubble, PipeSchedule::kInterleaved}) {
        s.schedule = sch;
        s.virtual_stages = sch == PipeSchedule::kInterleaved ? 2 : 1;
        const PipeOptions o{2, 8, s.virtual_stages, sch};
        const PlanCost c = plan_cost(base, s, &prof);
        const double idle = simulated_idle(base, o);
        EXPECT_NEAR(c.time.bubble, c.time.compute * idle, 1e-12 * c.time.compute)
            << pipe_schedule_name(sch);
        // The tiny model's head is 0.15 of a block: near the formula. Over the busiest rank the
        // idle time is a little under it (the fill and drain run the lighter pieces).
        EXPECT_GT(idle, 0.8 * pipe_bubble_formula(o)) << pipe_schedule_name(sch);
        EXPECT_LT(idle, 1.2 * pipe_bubble_formula(o)) << pipe_schedule_name(sch);
    }
    EXPECT_GT(plan_cost(base, s, &prof).time.pp_comm, 0);
    // Equal pieces give the formula: the zero-bubble third of 1F1B's.
    PipeCosts equal;
    equal.block.assign(4, 1.0);
    const PipeOptions zb{2, 8, 1, PipeSchedule::kZeroBubble};
    const PipeTimeline t = simulate_pipe(zb, pipe_schedule(zb), 1, 1, 1,
                                         piece_costs(balanced_partition(zb, equal), equal));
    EXPECT_NEAR(t.makespan / t.busy[0] - 1.0, (2 - 1) / 24.0, 1e-12);
}

// Note [Bubble on shared cores]: ranks sharing too few cores lend a bubble's idle core to the
// others; the step waits for the host's work over its cores or one rank's full-speed path.
TEST(CostModel, BubbleOnSharedCoresIsWhatTheFullSpeedPathAdds) {
    PlanBase base = tiny_gpt_base(8);
    base.threads = 1;
    const MachineProfile prof = round_profile();
    Strategy s;
    s.pp = 2;
    s.dp = 2;
    s.micro_batch = 2;
    s.grad_accum = 2;
    const PipeOptions o{2, 2, 1, PipeSchedule::kOneFOneB};
    const double idle = simulated_idle(base, o);
    base.cores = 4;  // a core a rank: the bubble whole
    const PlanCost own = plan_cost(base, s, &prof);
    EXPECT_NEAR(own.time.bubble, own.time.compute * idle, 1e-12 * own.time.compute);
    base.cores = 2;  // two ranks a core: the other rank's work fills the idle core
    const PlanCost shared = plan_cost(base, s, &prof);
    ASSERT_LT(idle, 1.0);
    EXPECT_EQ(shared.time.bubble, 0);  // the full-speed path, w / 2 (1 + idle), is under w
    base.cores = 3;                    // 4 / 3 oversubscribed: part of the bubble stays
    const PlanCost part = plan_cost(base, s, &prof);
    const double w3 = part.time.compute;
    ASSERT_GT(idle, 1.0 / 3);  // two micro-batches over two stages: about a half
    EXPECT_NEAR(part.time.bubble, w3 * 0.75 * (1 + idle) - w3, 1e-12 * w3);
    EXPECT_LT(part.time.bubble, w3 * idle);
}

// Note [Peak of stages 0 and 1]: the reduce's buffers and the activations never live together at
// stages 0 and 1; at 2 and 3 they do.
TEST(CostModel, PeakOverlapsCommAndActivationsOnlyFromStageTwo) {
    const PlanBase base = tiny_gpt_base();
    Strategy s;
    s.dp = 2;
    s.micro_batch = 4;
    for (int stage : {0, 1, 2, 3}) {
        s.zero_stage = stage;
        const PlanCost c = plan_cost(base, s, nullptr);
        const Estimate& e = c.memory;
        const int64_t comm = e.device[static_cast<int>(MemCategory::kComm)];
        const int64_t act = e.device[static_cast<int>(MemCategory::kActivations)];
        ASSERT_GT(comm, 0);
        // From stage 2 only the last bucket's received share is traded against them (Note
        // [Reduce buckets in the estimate]).
        const int64_t traded = stage >= 2 ? e.state.after_backward_comm : comm;
        ASSERT_GT(traded, 0);
        EXPECT_LT(traded, stage >= 2 ? comm : comm + 1);
        EXPECT_EQ(c.device_bytes, e.device_total - std::min(traded, act + e.workspace_transient))
            << stage;
    }
}

// The nvme tier's step (Note [Disk calibration]): the master weights and both Adam moments
// (12 bytes an element) read and written once, both directions at once at the disk's mixed
// rate (without one, the slower one-way rate), less the update that runs behind the I/O.
TEST(CostModel, NvmeStepMovesTheTierAtTheMixedRateBehindTheUpdate) {
    const PlanBase base = tiny_gpt_base();
    MachineProfile prof = round_profile();
    Strategy s;
    s.micro_batch = 8;
    s.zero_stage = 3;
    s.offload = "nvme";
    PlanCost c = plan_cost(base, s, &prof);
    const double tier = 12.0 * static_cast<double>(c.memory.state.shard_numel);
    EXPECT_DOUBLE_EQ(c.time.offload_io, std::max(0.0, 2 * tier / 5e8 - c.time.optimizer));
    EXPECT_GT(c.time.offload_io, 0);
    prof.disk_mixed_bytes_per_s = 4e9;
    c = plan_cost(base, s, &prof);
    EXPECT_DOUBLE_EQ(c.time.offload_io, std::max(0.0, 2 * tier / 4e9 - c.time.optimizer));
    prof.disk_mixed_bytes_per_s = 1e15;  // a disk faster than the update: nothing exposed
    EXPECT_EQ(plan_cost(base, s, &prof).time.offload_io, 0);
    // Note [Weights from the tier]: with offload_param on nvme, the f32 compute weights' shard
    // read twice (forward, backward) and written back once, at the one-way rates.
    PlanBase with_params = base;
    with_params.spec.state.offload_param = true;
    with_params.spec.state.offload_param_nvme = true;
    c = plan_cost(with_params, s, &prof);
    const double w = 4.0 * static_cast<double>(c.memory.state.shard_numel);
    EXPECT_DOUBLE_EQ(c.time.offload_io, 2 * w / 1e9 + w / 5e8);
    s.zero_stage = 2;  // weights offload only at stage 3
    EXPECT_EQ(plan_cost(with_params, s, &prof).time.offload_io, 0);
}

TEST(Calibrate, DiskMeasuredOnTheTiersPathInAllThreeWays) {
    const std::string dir = ::testing::TempDir() + "zt-disk-calibrate";
    MachineProfile p;
    measure_disk(dir, 16 << 20, p);
    EXPECT_EQ(p.disk_dir, dir);
    EXPECT_GT(p.disk_write_bytes_per_s, 0);
    EXPECT_GT(p.disk_read_bytes_per_s, 0);
    EXPECT_GT(p.disk_mixed_bytes_per_s, 0);
    EXPECT_TRUE(std::filesystem::is_empty(dir)) << "the swap file is removed";
    MachineProfile with_rates = round_profile();  // a profile file needs rates
    with_rates.disk_mixed_bytes_per_s = p.disk_mixed_bytes_per_s;
    with_rates.disk_direct = p.disk_direct;
    const MachineProfile q = profile_from_json(profile_json(with_rates), "test");
    EXPECT_EQ(q.disk_mixed_bytes_per_s, p.disk_mixed_bytes_per_s);
    EXPECT_EQ(q.disk_direct, p.disk_direct);
    MachineProfile none;  // a directory that cannot be made: no figures, no error
    measure_disk("/proc/zt-no-such-dir", 16 << 20, none);
    EXPECT_EQ(none.disk_mixed_bytes_per_s, 0);
    EXPECT_TRUE(none.disk_dir.empty());
}

TEST(CostModel, RefusesWhatTheFamilyCannotSplit) {
    const PlanBase base = tiny_gpt_base();
    Strategy s;
    s.tp = 3;  // 4 heads
    EXPECT_THROW(plan_memory(base, s), Error);
    s.tp = 1;
    s.pp = 5;  // 4 blocks
    s.grad_accum = 1;
    s.micro_batch = 8;
    EXPECT_THROW(plan_memory(base, s), Error);
}

TEST(Profile, JsonRoundTripAndThreadInterpolation) {
    const MachineProfile p = round_profile();
    const MachineProfile q = profile_from_json(profile_json(p), "test");
    EXPECT_EQ(profile_json(q), profile_json(p));
    const ThreadRates mid = q.at_threads(2);  // a third of the way from 1 to 4 threads
    EXPECT_NEAR(mid.gemm_flops[0][1], 2e9 + (8e9 - 2e9) / 3, 1);
    EXPECT_NEAR(q.at_threads(8).gemm_flops[0][1], 8e9, 1);  // no faster past the measured cores
    EXPECT_THROW(profile_from_json(nlohmann::json{{"version", 99}}, "x"), Error);
    // The team's costs travel with the rates and interpolate like them.
    MachineProfile t = round_profile();
    t.rates[1].team_region_s = 3e-5;
    t.rates[1].team_min_elems = 9000;
    const MachineProfile u = profile_from_json(profile_json(t), "test");
    EXPECT_EQ(u.at_threads(4).team_region_s, 3e-5);
    EXPECT_EQ(u.at_threads(4).team_min_elems, 9000);
    EXPECT_NEAR(u.at_threads(2).team_region_s, 1e-5, 1e-18);
    nlohmann::json bad = profile_json(t);
    bad["rates"][1]["team_region_s"] = -1;
    EXPECT_THROW(profile_from_json(bad, "x"), Error);
}

// What a plan fills into a profile from before the team's costs were kept: every entry past one
// thread, measured by the engine; one thread has no team.
TEST(Calibrate, FillsTheTeamsCostsOnce) {
    MachineProfile p = round_profile();
    p.rates[1].threads = 2;
    EXPECT_EQ(fill_team_costs(p), 1);
    EXPECT_EQ(p.rates[0].team_region_s, 0);
    EXPECT_GT(p.rates[1].team_region_s, 0);
    EXPECT_EQ(p.rates[1].team_min_elems, static_cast<double>(parallel_grain(2).min_elems));
    EXPECT_EQ(fill_team_costs(p), 0);
}

TEST(Calibrate, FitRecoversALine) {
    const double lat = 3e-5, bus = 2e9, factor = all_reduce_bus_factor(4);  // 1.5
    std::vector<std::pair<double, double>> pts;
    for (double b : {4096.0, 262144.0, 4194304.0}) pts.emplace_back(b, lat + factor * b / bus);
    const CollectiveFit f = fit_collective(pts, factor);
    EXPECT_NEAR(f.latency_s, lat, 1e-12);
    EXPECT_NEAR(f.bus_bytes_per_s, bus, bus * 1e-9);
    EXPECT_NEAR(f.time_s(1e6, factor), lat + factor * 1e6 / bus, 1e-12);
}

// Note [Collective times between sizes]: between measured sizes the straight line through the
// two, below the smallest its time, past the largest the last two points' rate; a smaller size
// never costs more than a larger one measured; kept through the profile file.
TEST(Calibrate, CollectiveTimesInterpolateTheMeasuredSizes) {
    // This machine's local all-reduce (session 25): 4 KiB measured slower than 256 KiB.
    const std::vector<std::pair<double, double>> ar = {
        {4096, 1.67e-4}, {262144, 1.32e-4}, {4194304, 5.35e-4}, {16777216, 3.19e-3}};
    CollectiveFit f = fit_collective(ar, 1.0);  // two ranks: bus factor 1
    const double line = f.time_s(309448, 1.0);
    f.set_points(ar, 1.0);
    ASSERT_EQ(f.points.size(), 4u);
    EXPECT_EQ(f.points[0].second, 1.32e-4);  // bounded by the larger size's
    EXPECT_EQ(f.time_s(8, 1.0), 1.32e-4);
    EXPECT_EQ(f.time_s(4096, 1.0), 1.32e-4);
    const double mid = 1.32e-4 + (5.35e-4 - 1.32e-4) * (309448.0 - 262144) / (4194304 - 262144);
    EXPECT_NEAR(f.time_s(309448, 1.0), mid, 1e-15);
    EXPECT_GT(f.time_s(309448, 1.0), 1.5 * line);  // the line's 82 us against 137 here
    EXPECT_NEAR(f.time_s(4194304, 1.0), 5.35e-4, 1e-15);
    const double rate = (3.19e-3 - 5.35e-4) / (16777216.0 - 4194304);
    EXPECT_NEAR(f.time_s(33554432, 1.0), 3.19e-3 + rate * 16777216, 1e-15);
    // Another rank count: the bus bytes (4 ranks: 1.5 x the payload) are interpolated.
    EXPECT_NEAR(f.time_s(309448 / 1.5, 1.5), mid, 1e-15);
    // Through the profile file: the points come back from the measured ones it keeps.
    MachineProfile p = round_profile();
    nlohmann::json pts = nlohmann::json::array();
    for (const auto& [b, t] : ar) pts.push_back({b, t});
    p.comm[0].points = {{"all_reduce", pts}};
    const MachineProfile q = profile_from_json(profile_json(p), "test");
    EXPECT_NEAR(q.comm[0].all_reduce.time_s(309448, 1.0), mid, 1e-15);
    EXPECT_TRUE(q.comm[0].all_gather.points.empty());  // none kept: the line
    EXPECT_EQ(q.comm[0].all_gather.time_s(1e6, 1.0), 1e-5 + 1e6 / 1e9);
    nlohmann::json bad = profile_json(p);
    bad["comm"][0]["points"]["all_reduce"][1] = "x";
    try {
        profile_from_json(bad, "p.json");
        FAIL() << "a bad point was read";
    } catch (const Error& e) {
        EXPECT_NE(e.message().find("\"x\" of all_reduce is not [bytes, seconds]"),
                  std::string::npos)
            << e.message();
    }
    // The cost model: a ZeRO-0 reduction in rb buckets is rb calls of a bucket's bytes.
    const PlanBase base = tiny_gpt_base();
    MachineProfile r = round_profile();
    r.comm[0].all_reduce.set_points(ar, 1.0);
    Strategy s;
    s.dp = 2;
    s.micro_batch = 4;
    s.grad_accum = 1;
    const PlanCost c = plan_cost(base, s, &r);
    const double P = static_cast<double>(c.memory.state.padded_numel);
    const double rb =
        std::max(1.0, std::ceil(P / static_cast<double>(c.memory.spec.state.reduce_bucket_numel)));
    EXPECT_NEAR(c.time.dp_comm, rb * r.comm[0].all_reduce.time_s(4 * P / rb, 1.0), 1e-15);
}

}  // namespace
}  // namespace zt
