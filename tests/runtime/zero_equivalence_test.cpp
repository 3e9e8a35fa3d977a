// The equivalence rule (DESIGN.md) for data parallelism and ZeRO stages 0-3 on the local backend:
// N ranks with accumulation G train like one process with accumulation N x G over the same
// samples. Bit for bit: a repeated run; stage 0 against 1 (both reduce at the accumulation
// boundary), stage 2 against 3 (both reduce every micro-step), all four stages at G = 1, and one
// rank against the plain engine. Other rank counts: within DESIGN's tolerances (fp32 1e-4, bf16
// and fp16 1e-2 relative loss difference per step; the largest seen is printed), for the loss, the
// gradient norm and the final weights. AdamW barely sees a constant factor on the gradients and
// clipping hides one, so plain SGD without clipping is a case too: a missing 1/N in the loss scale
// (engine.cpp) shows there as an N times larger gradient norm and other weights.
#include <gtest/gtest.h>

#include <cmath>

#include "comm/local/local_comm.h"
#include "models/gpt/gpt.h"
#include "optim/adamw.h"
#include "optim/sgd.h"
#include "runtime/engine.h"
#include "runtime/toy_sequences.h"
#include "tensor/threads.h"

namespace zt {

namespace {

constexpr int64_t kV = 48, kT = 8, kSteps = 20, kMicro = 2;

struct DpSetup {
    int ranks = 1;
    int stage = 0;
    int64_t grad_accum = 1;  // per rank
    DType compute = DType::kF32;
    double clip = 0.0;
    bool overlap = true;
    int64_t bucket = 700;  // elements: several buckets per model
    std::string checkpointing = "none";
    int64_t prefetch = 2000;
    int64_t persistence = 100;
    DType comm = DType::kF32;  // communication_data_type
    bool sgd = false;          // plain SGD (no momentum, no weight decay) instead of AdamW
};

struct Trajectory {
    std::vector<double> loss, grad_norm;
    std::vector<char> skipped;
    std::vector<float> weights;  // whole master after the last step
};

EngineOptions options_for(const DpSetup& s, Communicator* comm) {
    EngineOptions eo;
    eo.compute_dtype = s.compute;
    eo.grad_accum = s.grad_accum;
    eo.gradient_clipping = s.clip;
    eo.lr = 3e-3;
    eo.seed = 5;
    if (s.sgd) {
        eo.lr = 0.5;  // SGD steps are the gradient itself: a rate that learns in kSteps
        eo.optimizer = std::make_unique<Sgd>(SgdOptions{});
    } else {
        AdamWOptions ao;
        ao.weight_decay = 0.1;
        eo.optimizer = std::make_unique<AdamW>(ao);
    }
    eo.loss_scaler.initial_scale_power = 12;
    eo.comm = comm;
    eo.zero.stage = s.stage;
    eo.zero.overlap_comm = s.overlap;
    eo.zero.reduce_bucket_size = s.bucket;
    eo.zero.allgather_bucket_size = 1000;
    eo.zero.prefetch_bucket_size = s.prefetch;
    eo.zero.persistence_threshold = s.persistence;
    eo.zero.comm_dtype = s.comm;
    return eo;
}

void train_rank(const DpSetup& s, Communicator* comm, Trajectory* out) {
    set_num_threads(1);
    const int rank = comm ? comm->rank() : 0;
    MemoryPool pool;
    GptOptions go{kV, kT, 16, 2, 2};
    go.checkpoint_policy = s.checkpointing;
    Engine e(pool, std::make_unique<Gpt>(go), options_for(s, comm));
    std::vector<int32_t> in(kMicro * kT), tg(kMicro * kT);
    for (int64_t step = 0; step < kSteps; ++step) {
        for (int64_t m = 0; m < s.grad_accum; ++m) {
            testing::toy_micro_batch(in, tg, step, m, rank, kMicro, s.grad_accum, s.ranks, kT, kV);
            e.forward_backward(Batch{in, tg, kMicro, kT});
        }
        StepStats st = e.step();
        if (rank == 0) {
            out->loss.push_back(st.loss);
            out->grad_norm.push_back(st.grad_norm);
            out->skipped.push_back(st.skipped);
        }
    }
    std::vector<float> w = e.gather_master();
    if (rank == 0) out->weights = std::move(w);
}

Trajectory train(const DpSetup& s) {
    Trajectory t;
    run_local_ranks(s.ranks, [&](Communicator& c) { train_rank(s, &c, &t); });
    return t;
}

// One process, no communicator, accumulation N x G: the reference.
Trajectory reference(DpSetup s) {
    s.grad_accum *= s.ranks;
    s.ranks = 1;
    s.stage = 0;
    Trajectory t;
    train_rank(s, nullptr, &t);
    return t;
}

double max_rel_diff(const std::vector<double>& a, const std::vector<double>& b) {
    double worst = 0;
    for (size_t i = 0; i < a.size(); ++i)
        worst = std::max(worst, std::fabs(a[i] - b[i]) / std::fabs(b[i]));
    return worst;
}

// max |a - b| over max |b|: the weights' difference relative to their scale.
double rel_weight_diff(const std::vector<float>& a, const std::vector<float>& b) {
    double diff = 0, scale = 0;
    for (size_t i = 0; i < b.size(); ++i) {
        diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - b[i]));
        scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
    }
    return diff / scale;
}

// Loss and gradient norm at every step within `tol` relative and the final weights within
// `weight_tol` of their scale, against the reference; the largest differences are printed.
void expect_close(const Trajectory& got, const Trajectory& ref, double tol, const std::string& what,
                  double weight_tol) {
    ASSERT_EQ(got.loss.size(), ref.loss.size()) << what;
    ASSERT_EQ(got.weights.size(), ref.weights.size()) << what;
    const double dl = max_rel_diff(got.loss, ref.loss);
    const double dg = max_rel_diff(got.grad_norm, ref.grad_norm);
    const double dw = rel_weight_diff(got.weights, ref.weights);
    std::printf("[ equiv ] %s: max relative difference: loss %.3g, grad_norm %.3g, weights %.3g\n",
                what.c_str(), dl, dg, dw);
    EXPECT_LE(dl, tol) << what << ": loss";
    EXPECT_LE(dg, tol) << what << ": grad_norm";
    EXPECT_LE(dw, weight_tol) << what << ": final weights";
}

void expect_same_bits(const Trajectory& a, const Trajectory& b, const std::string& what) {
    ASSERT_EQ(a.loss.size(), b.loss.size()) << what;
    for (size_t i = 0; i < a.loss.size(); ++i) {
        EXPECT_EQ(a.loss[i], b.loss[i]) << what << ", step " << i + 1;
        EXPECT_EQ(a.grad_norm[i], b.grad_norm[i]) << what << ", step " << i + 1;
    }
    EXPECT_EQ(a.weights, b.weights) << what;
}

double tolerance(DType t) { return t == DType::kF32 ? 1e-4 : 1e-2; }

struct Case {
    const char* name;
    DType compute;
    int64_t grad_accum;
    double clip;
    DType comm = DType::kF32;
    double weight_tol = 0;  // 0: tolerance(compute)
};

// Small weight (seen far below 1 otherwise): 0.05 keeps clipping active in every step.
// bf16 communication rounds each reduced gradient to 8 significant bits, and AdamW's per-element
// normalization turns that into whole steps of another size or sign where a gradient is near zero:
// the final weights differ by up to 4.6e-2 of their scale (seen at 2 ranks, stage 2), the loss by
// 3.4e-4 at most.
const Case kCases[] = {{"fp32_accum2_clip", DType::kF32, 2, 0.05},
                       {"bf16", DType::kBF16, 1, 0.0},
                       {"fp16_clip", DType::kF16, 1, 1.0},
                       {"bf16_accum2_bf16_comm", DType::kBF16, 2, 0.0, DType::kBF16, 0.1}};

}  // namespace

class ZeroEquivalence : public ::testing::TestWithParam<Case> {};

TEST_P(ZeroEquivalence, EveryStageAndRankCountTrainsLikeOneProcess) {
    const Case c = GetParam();
    for (int ranks : {1, 2, 3, 4}) {
        DpSetup base{.ranks = ranks,
                     .grad_accum = c.grad_accum,
                     .compute = c.compute,
                     .clip = c.clip,
                     .comm = c.comm};
        const Trajectory ref = reference(base);
        ASSERT_EQ(ref.loss.size(), static_cast<size_t>(kSteps));
        EXPECT_LT(ref.loss.back(), ref.loss.front()) << "the reference does not learn";
        Trajectory by_stage[4];
        for (int stage = 0; stage <= 3; ++stage) {
            DpSetup s = base;
            s.stage = stage;
            by_stage[stage] = train(s);
            const std::string what = std::string(c.name) + ", " + std::to_string(ranks) +
                                     " ranks, stage " + std::to_string(stage);
            expect_close(by_stage[stage], ref, tolerance(c.compute), what,
                         c.weight_tol > 0 ? c.weight_tol : tolerance(c.compute));
            if (ranks == 1 && stage == 0) expect_same_bits(by_stage[0], ref, what + " vs engine");
        }
        const std::string at = std::string(c.name) + ", " + std::to_string(ranks) + " ranks";
        expect_same_bits(by_stage[1], by_stage[0], at + ": stage 1 vs 0");
        expect_same_bits(by_stage[3], by_stage[2], at + ": stage 3 vs 2");
        if (c.grad_accum == 1) expect_same_bits(by_stage[2], by_stage[0], at + ": stage 2 vs 0");
    }
}

INSTANTIATE_TEST_SUITE_P(Matrix, ZeroEquivalence, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

// Plain SGD, no clipping, fp32: the update is lr times the reduced gradient, so the gradients'
// scale reaches the weights unchanged. The cheapest runs that cover every stage at 2 and 4 ranks.
TEST(ZeroEquivalence, SgdWithoutClippingTrainsLikeOneProcess) {
    for (int ranks : {2, 4}) {
        const DpSetup base{.ranks = ranks, .sgd = true};
        const Trajectory ref = reference(base);
        ASSERT_EQ(ref.loss.size(), static_cast<size_t>(kSteps));
        EXPECT_LT(ref.loss.back(), ref.loss.front()) << "the reference does not learn";
        for (int stage = 0; stage <= 3; ++stage) {
            DpSetup s = base;
            s.stage = stage;
            expect_close(train(s), ref, tolerance(DType::kF32),
                         "sgd, " + std::to_string(ranks) + " ranks, stage " + std::to_string(stage),
                         tolerance(DType::kF32));
        }
    }
}

TEST(ZeroEquivalence, RepeatedRunGivesSameBits) {
    DpSetup s{.ranks = 3, .stage = 3, .grad_accum = 2, .compute = DType::kBF16};
    expect_same_bits(train(s), train(s), "stage 3, 3 ranks, repeated");
}

TEST(ZeroEquivalence, BucketSizeAndOverlapDoNotChangeBits) {
    for (int stage : {0, 2, 3}) {
        DpSetup a{.ranks = 2, .stage = stage, .grad_accum = 2};
        DpSetup b = a;
        b.bucket = 1;  // one bucket per parameter
        b.overlap = false;
        DpSetup c = a;
        c.bucket = 1 << 30;  // one bucket for everything
        const Trajectory ta = train(a);
        expect_same_bits(train(b), ta, "small buckets, no overlap, stage " + std::to_string(stage));
        expect_same_bits(train(c), ta, "one bucket, stage " + std::to_string(stage));
    }
}

TEST(ZeroEquivalence, Stage3PrefetchPersistenceAndCheckpointingDoNotChangeBits) {
    DpSetup a{.ranks = 2, .stage = 3, .grad_accum = 2};
    const Trajectory ta = train(a);
    DpSetup no_prefetch = a;
    no_prefetch.prefetch = 0;
    no_prefetch.persistence = 0;
    expect_same_bits(train(no_prefetch), ta, "no prefetch, nothing persistent");
    DpSetup all_persistent = a;
    all_persistent.persistence = 1 << 30;
    expect_same_bits(train(all_persistent), ta, "everything persistent");
    for (const char* policy : {"every", "selective"}) {
        DpSetup ck = a;
        ck.checkpointing = policy;
        expect_same_bits(train(ck), ta, std::string("activation checkpointing ") + policy);
    }
}

}  // namespace zt
