// The parts a ZeRO stage is made of (parallel/zero_stage.h), each against its formula on a small
// arena over 3 local ranks: 14 elements in 4 parameters, padded to 15, gradient buckets of 4
// elements that straddle the owned ranges. Gradients are small integers, exact in bf16 and in any
// order of addition, so the reduced values must equal the formula exactly. Bit-identity of whole
// training runs across stages is tests/runtime/zero_equivalence_test.cpp's.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "comm/local/local_comm.h"
#include "parallel/zero.h"

namespace zt {
namespace {

constexpr int kRanks = 3;
constexpr int64_t kNumel = 14, kPadded = 15, kLeafNumel = 7;

class Leaf : public Module {
  public:
    Leaf(int64_t w, int64_t b) {
        register_parameter("w", {w}, ParamInit::zeros(), true);
        register_parameter("b", {b}, ParamInit::zeros(), false);
    }
};

// l0.w [0, 5), l0.b [5, 7), l1.w [7, 11), l1.b [11, 14); rank r owns [5r, 5r + 5).
class Net : public Module {
  public:
    Net() {
        register_module<Leaf>("l0", 5, 2);
        register_module<Leaf>("l1", 4, 3);
    }
    Module& leaf(int i) { return *children()[static_cast<size_t>(i)]; }
};

// One rank's model, arena laid out for the stage, and data-parallel object.
struct Rank {
    MemoryPool pool;
    Net net;
    std::unique_ptr<ParamArena> arena;
    std::unique_ptr<ZeroDataParallel> dp;

    Rank(Communicator& comm, ZeroOptions z, DType compute) {
        arena = std::make_unique<ParamArena>(
            pool, net.parameters(),
            zero_arena_options(z.stage, compute, DType::kF32, kNumel, comm.size(), comm.rank()));
        dp = std::make_unique<ZeroDataParallel>(pool, net, *arena, &comm, z);
    }
    // What the engine's load_master does over the in-memory tier: this rank's update range of
    // `whole` into the master weights, the compute copy from them, then after_update().
    void load_master(const std::vector<float>& whole) {
        Tensor m = dp->update_master();
        const int64_t lo = dp->update_range().lo;
        std::copy(whole.begin() + lo, whole.begin() + lo + m.numel(), m.data<float>());
        arena->sync_compute();
        dp->after_update();
    }
    std::vector<float> gather_master() {
        return dp->gather_update_ranges(dp->update_master().data<float>());
    }
};

// Rank r's gradient of arena element i in micro-step m.
float grad_value(int r, int m, int64_t i) { return static_cast<float>((r + 1) * (m + 1) + i % 7); }

// What backward would do: add rank r's micro-step m gradients to every parameter's gradient.
void add_grads(Rank& R, int r, int m) {
    for (Parameter* p : R.arena->params()) {
        if (!p->grad.defined()) p->var->bind_grad(*p->var);  // stages 2-3: a lent bucket
        float* g = p->grad.data<float>();
        for (int64_t k = 0; k < p->numel(); ++k) g[k] += grad_value(r, m, p->offset + k);
    }
}

ZeroOptions options(int stage) {
    ZeroOptions z;
    z.stage = stage;
    z.reduce_bucket_size = 4;     // buckets [11, 15), [7, 11), [0, 7)
    z.allgather_bucket_size = 4;  // stages 1-2: gathers [0, 4) ... [12, 15)
    z.persistence_threshold = 0;  // stage 3: every module gathered around each use
    z.prefetch_bucket_size = 0;
    return z;
}

TEST(ZeroStage, EachStageIsItsType) {
    run_local_ranks(kRanks, [](Communicator& c) {
        for (int stage = 0; stage <= 3; ++stage) {
            Rank R(c, options(stage), DType::kF32);
            EXPECT_EQ(R.dp->stage(), stage);
            const Range owned = owned_range(kPadded, kRanks, c.rank());
            const Range update = stage == 0 ? Range{0, kPadded} : owned;
            EXPECT_EQ(R.dp->update_range(), update);
            EXPECT_EQ(R.dp->update_grads().numel(), R.dp->update_range().size());
        }
    });
}

TEST(ZeroStage, UnknownStageIsAnInputError) {
    MemoryPool pool;
    Net net;
    ParamArena arena(pool, net.parameters(),
                     zero_arena_options(0, DType::kF32, DType::kF32, kNumel, 1, 0));
    ZeroOptions z;
    z.stage = 4;
    EXPECT_THROW({ ZeroDataParallel dp(pool, net, arena, nullptr, z); }, Error);
}

// Two micro-steps, the second at the accumulation boundary. Stages 0-1 reduce once, at the
// boundary (after the first micro-step every rank still holds its own gradients); stages 2-3
// reduce every micro-step and add the owned slices. Either way the update range ends up with the
// sum over ranks and micro-steps, in f32 and through a bf16 wire.
TEST(ZeroStage, GradientReductionSumsOverRanksIntoTheUpdateRange) {
    for (DType wire : {DType::kF32, DType::kBF16})
        for (int stage = 0; stage <= 3; ++stage)
            run_local_ranks(kRanks, [&](Communicator& c) {
                const int r = c.rank();
                ZeroOptions z = options(stage);
                z.comm_dtype = wire;
                Rank R(c, z, DType::kF32);
                const Range u = R.dp->update_range();
                const std::string what = "stage " + std::to_string(stage) + ", wire " +
                                         dtype_name(wire) + ", rank " + std::to_string(r);

                R.dp->begin_backward(false);
                add_grads(R, r, 0);
                R.dp->end_backward();
                std::vector<float> g = R.dp->update_grads().to_vector();
                for (int64_t i = u.lo; i < std::min(u.hi, kNumel); ++i) {
                    float want = 0;
                    if (stage >= 2)
                        for (int q = 0; q < kRanks; ++q) want += grad_value(q, 0, i);
                    else
                        want = grad_value(r, 0, i);
                    ASSERT_EQ(g[static_cast<size_t>(i - u.lo)], want) << what << ", element " << i;
                }

                R.dp->begin_backward(true);
                add_grads(R, r, 1);
                R.dp->end_backward();
                g = R.dp->update_grads().to_vector();
                for (int64_t i = u.lo; i < u.hi; ++i) {
                    float want = 0;
                    for (int m = 0; m < 2; ++m)
                        for (int q = 0; q < kRanks && i < kNumel; ++q) want += grad_value(q, m, i);
                    ASSERT_EQ(g[static_cast<size_t>(i - u.lo)], want) << what << ", element " << i;
                }
                if (stage >= 2) {  // the lent bucket buffers went back
                    for (Parameter* p : R.arena->params()) EXPECT_FALSE(p->grad.defined()) << what;
                }
            });
}

// The gradient norm's sum: stage 0 takes every rank's partition locally, stages 1-3 their own
// and sum over ranks; both add the partitions in rank order, so the bits are the same. The
// partitions' sums (about 1.09, 1e20 and -1e20) make the order visible: 0 in rank order, 1.09 in
// reverse.
std::vector<float> order_revealing_grads() {
    std::vector<float> whole(kPadded);
    for (int64_t i = 0; i < kPadded; ++i) whole[static_cast<size_t>(i)] = 1.0f / (3.0f + i);
    whole[5] = 1e20f;    // rank 1's partition
    whole[10] = -1e20f;  // rank 2's
    return whole;
}

double plain_sum(float* g, int64_t n) {
    double s = 0;
    for (int64_t k = 0; k < n; ++k) s += g[k];
    return s;
}

TEST(ZeroStage, PartitionedSumAddsPartitionsInRankOrderAtEveryStage) {
    std::vector<float> whole = order_revealing_grads();
    const auto part = plain_sum;
    double want = 0;
    for (int q = 0; q < kRanks; ++q) {
        const Range pr = owned_range(kPadded, kRanks, q);
        want += part(whole.data() + pr.lo, pr.size());
    }
    ASSERT_EQ(want, 0.0);
    for (int stage = 0; stage <= 3; ++stage)
        run_local_ranks(kRanks, [&](Communicator& c) {
            Rank R(c, options(stage), DType::kF32);
            std::vector<float> g(whole.begin() + R.dp->update_range().lo,
                                 whole.begin() + R.dp->update_range().hi);
            EXPECT_EQ(R.dp->partitioned_sum(g.data(), part), want) << "stage " << stage;
        });
}

// Note [The step's scalars in one collective]: the norm's local half summed with other scalars
// in one all-gather gives partitioned_sum's bits at every stage, and the loss beside it its own
// rank-order sum; one collective however many scalars travel.
TEST(ZeroStage, ScalarsSummedTogetherInOneCollectiveKeepTheirBits) {
    std::vector<float> whole = order_revealing_grads();
    const auto part = plain_sum;
    const double losses[kRanks] = {1e17, 0.75, -1e17};  // rank order: 0; reversed: 0.75
    double want_loss = 0;
    for (double l : losses) want_loss += l;
    ASSERT_EQ(want_loss, 0.0);
    for (int stage = 0; stage <= 3; ++stage)
        run_local_ranks(kRanks, [&](Communicator& c) {
            Rank R(c, options(stage), DType::kF32);
            std::vector<float> g(whole.begin() + R.dp->update_range().lo,
                                 whole.begin() + R.dp->update_range().hi);
            const double norm = R.dp->partitioned_sum(g.data(), part);
            const double mine = R.dp->partitioned_local_sum(g.data(), part);
            EXPECT_EQ(R.dp->partitioned_over_ranks(), stage >= 1) << "stage " << stage;
            std::vector<double> xs = {losses[c.rank()]};
            if (R.dp->partitioned_over_ranks()) xs.push_back(mine);
            c.reset_stats();
            const std::vector<double> sums = R.dp->sums_over_ranks(xs);
            const CommStats st = c.stats();
            int64_t ops = 0;
            for (int64_t n : st.count) ops += n;
            EXPECT_EQ(ops, 1) << "stage " << stage;
            EXPECT_EQ(sums[0], want_loss) << "stage " << stage;
            EXPECT_EQ(stage >= 1 ? sums[1] : mine, norm) << "stage " << stage;
        });
}

// Parameter gathering at stages 1-2: after loading master weights (ending in after_update()), the
// compute copy every rank holds whole equals the master weights each rank set in its owned
// range; at every stage gather_master() returns them whole.
TEST(ZeroStage, AllGatherWeightsMakesTheComputeCopyWhole) {
    std::vector<float> whole(kPadded, 0.0f);
    for (int64_t i = 0; i < kNumel; ++i) whole[static_cast<size_t>(i)] = 0.5f * (i + 1);
    for (DType compute : {DType::kF32, DType::kBF16})
        for (int stage = 0; stage <= 3; ++stage)
            run_local_ranks(kRanks, [&](Communicator& c) {
                Rank R(c, options(stage), compute);
                R.load_master(whole);
                const std::string what =
                    "stage " + std::to_string(stage) + ", compute " + dtype_name(compute);
                EXPECT_EQ(R.gather_master(), whole) << what;
                if (stage == 3) return;  // compute copy partitioned: ModuleGather's test
                EXPECT_EQ(R.arena->compute().to_vector(), whole) << what;
            });
}

// Stage 3: a module's parameters are gathered before its forward or backward and released after;
// with a persistence threshold above its size they stay gathered and follow each update.
TEST(ZeroStage, ModuleGatherHoldsParametersAroundEachUse) {
    std::vector<float> whole(kPadded, 0.0f);
    for (int64_t i = 0; i < kNumel; ++i) whole[static_cast<size_t>(i)] = 0.25f * (i + 2);
    auto expect_gathered = [&](Module& m, float shift, const std::string& what) {
        for (Parameter* p : m.own_parameters()) {
            ASSERT_TRUE(p->var->value.defined()) << what << ": " << p->name;
            const std::vector<float> v = p->var->value.to_vector();
            for (int64_t k = 0; k < p->numel(); ++k)
                EXPECT_EQ(v[static_cast<size_t>(k)],
                          whole[static_cast<size_t>(p->offset + k)] + shift)
                    << what << ": " << p->name << "[" << k << "]";
        }
    };
    run_local_ranks(kRanks, [&](Communicator& c) {
        Rank R(c, options(3), DType::kBF16);
        R.load_master(whole);
        EXPECT_EQ(R.dp->live_gathered(), 0);
        for (int l = 0; l < 2; ++l) {
            Module& leaf = R.net.leaf(l);
            for (HookPoint pre : {HookPoint::kPreForward, HookPoint::kPreBackward}) {
                leaf.run_hooks(pre);
                expect_gathered(leaf, 0.0f, "transient, leaf " + std::to_string(l));
                EXPECT_EQ(R.dp->live_gathered(), kLeafNumel);
                leaf.run_hooks(pre == HookPoint::kPreForward ? HookPoint::kPostForward
                                                             : HookPoint::kPostBackward);
                for (Parameter* p : leaf.own_parameters()) EXPECT_FALSE(p->var->value.defined());
                EXPECT_EQ(R.dp->live_gathered(), 0);
            }
        }
    });
    run_local_ranks(kRanks, [&](Communicator& c) {
        ZeroOptions z = options(3);
        z.persistence_threshold = kLeafNumel + 1;  // both leaves stay gathered
        Rank R(c, z, DType::kBF16);
        R.load_master(whole);
        EXPECT_EQ(R.dp->live_gathered(), kNumel);
        for (int l = 0; l < 2; ++l) expect_gathered(R.net.leaf(l), 0.0f, "persistent");
        R.net.leaf(1).run_hooks(HookPoint::kPreForward);
        R.net.leaf(1).run_hooks(HookPoint::kPostForward);
        EXPECT_EQ(R.dp->live_gathered(), kNumel);  // still held
        // An update of the owned master range reaches the persistent copies.
        std::vector<float> shifted = whole;
        for (int64_t i = 0; i < kNumel; ++i) shifted[static_cast<size_t>(i)] += 1.0f;
        R.load_master(shifted);
        for (int l = 0; l < 2; ++l) expect_gathered(R.net.leaf(l), 1.0f, "after the update");
    });
}

}  // namespace
}  // namespace zt
