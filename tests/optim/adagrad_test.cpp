// The fused Adagrad step (optim/adagrad.h) against a plain scalar loop of Note [Adagrad op
// order], written here from PyTorch's _single_tensor_adagrad, bit for bit: p, sum and the compute
// copy (bf16, f16, f32, none), sizes around the vector width and one far above the parallel
// threshold, decay and no-decay segments, lr_decay and initial_accumulator_value, thread counts 1
// and 2, the AVX-512 and portable paths.
#include "optim/adagrad.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "fused_test_util.h"
#include "optim/segment_partition.h"
#include "tensor/threads.h"

namespace zt {
namespace {

using namespace fused_test;
using optim_detail::KernelPath;

struct RefState {
    std::vector<float> p, sum;
    CopyBuffers copy;
};

// One step of torch.optim.Adagrad (single-tensor, dense) as PyTorch runs it on f32 tensors with
// Python (double) scalars; no FMA (ZT_OPTIM_NO_CONTRACT), one element at a time.
ZT_OPTIM_KERNEL void ref_step(RefState& s, const std::vector<float>& g,
                              const std::vector<OptimSegment>& segs, const AdagradOptions& o,
                              float lr, int64_t t, DType copy_dtype, bool copy) {
    ZT_OPTIM_NO_CONTRACT
    const double step = double(t);                                  // step_t.item()
    const double clr = double(lr) / (1 + (step - 1) * o.lr_decay);  // Python floats
    const float wd = float(o.weight_decay);                         // grad.add(p, alpha=wd)
    const float eps = float(o.eps);                                 // sqrt().add_(eps)
    const float value = float(-clr);                                // addcdiv_(.., value=-clr)
    for (const OptimSegment& seg : segs) {
        for (int64_t i = seg.offset; i < seg.offset + seg.numel; ++i) {
            const float pi = s.p[i];
            float gi = g[i];
            if (seg.decay && o.weight_decay != 0.0) gi = gi + wd * pi;
            const float sn = s.sum[i] + 1.0f * gi * gi;  // addcmul_(g, g, value=1)
            const float denom = std::sqrt(sn) + eps;
            const float pn = pi + value * gi / denom;
            s.sum[i] = sn;
            s.p[i] = pn;
            s.copy.write(i, pn, copy, copy_dtype);
        }
    }
}

struct Case {
    int64_t n;
    AdagradOptions o;
    bool copy;
    DType dtype;
    int threads;
    KernelPath path;
};

// Runs 4 steps through the optimizer (kBest: Adagrad::step over in-memory state; kPortable:
// adagrad_step over the test's buffers) and through ref_step, then compares every bit.
void check_against_reference(const Case& k) {
    SCOPED_TRACE(testing::Message()
                 << "n=" << k.n << " wd=" << k.o.weight_decay << " lr_decay=" << k.o.lr_decay
                 << " init=" << k.o.initial_accumulator_value
                 << " copy=" << (k.copy ? dtype_name(k.dtype) : "none") << " threads=" << k.threads
                 << " path=" << (k.path == KernelPath::kBest ? "best" : "portable"));
    std::mt19937 rng(4321 + k.n);
    std::vector<float> p = spread_weights(k.n, rng);
    std::vector<float> sum(k.n, 0.0f);
    CopyBuffers copy(k.n);
    const std::vector<OptimSegment> segs = odd_segments(k.n);
    // PyTorch: state["sum"] = torch.full_like(p, initial_accumulator_value), for each parameter;
    // elements in no segment belong to no parameter and keep the zero state.
    RefState ref{p, std::vector<float>(k.n, 0.0f), copy};
    for (const OptimSegment& seg : segs)
        std::fill_n(ref.sum.begin() + seg.offset, seg.numel, float(k.o.initial_accumulator_value));

    set_num_threads(k.threads);
    ASSERT_EQ(team_size(), k.threads);
    MemoryPool pool;
    Adagrad opt(k.o);
    opt.init_state(pool, k.n);
    for (int64_t t = 1; t <= 4; ++t) {
        const std::vector<float> g = grads(k.n, rng);
        const float lr = 1e-2f * float(t);  // changes per step, like a schedule
        const ComputeCopy cc = copy.as(k.copy, k.dtype);
        if (k.path == KernelPath::kBest)
            opt.step(p.data(), g.data(), segs, lr, t, cc);
        else
            adagrad_step(k.o, p.data(), g.data(), sum.data(), k.n, segs, lr, t, cc, k.path);
        ref_step(ref, g, segs, k.o, lr, t, k.dtype, k.copy);
    }
    set_num_threads(1);
    if (k.path == KernelPath::kBest) sum = opt.state()[0].second.to_vector();
    EXPECT_EQ(first_diff(p, ref.p), -1) << "p";
    EXPECT_EQ(first_diff(sum, ref.sum), -1) << "sum";
    EXPECT_EQ(first_diff(copy.c16, ref.copy.c16), -1) << "16-bit copy";
    EXPECT_EQ(first_diff(copy.c32, ref.copy.c32), -1) << "f32 copy";
}

AdagradOptions decaying() {
    AdagradOptions o;
    o.weight_decay = 0.1;
    o.lr_decay = 0.05;
    return o;
}

TEST(Adagrad, MatchesScalarFormulaBitForBit) {
    for (int64_t n : {1, 15, 16, 17, 33, 1031})
        for (DType dt : {DType::kBF16, DType::kF16, DType::kF32})
            for (int threads : {1, 2})
                for (KernelPath path : {KernelPath::kBest, KernelPath::kPortable})
                    check_against_reference({n, decaying(), true, dt, threads, path});
}

// 1000003 elements: far above the parallel threshold, odd, so each thread's share ends in a tail.
TEST(Adagrad, LargeOddRangeMatchesScalarFormulaOverThreadsAndPaths) {
    for (DType dt : {DType::kBF16, DType::kF16})
        for (int threads : {1, 2})
            for (KernelPath path : {KernelPath::kBest, KernelPath::kPortable})
                check_against_reference({1000003, decaying(), true, dt, threads, path});
    check_against_reference({1000003, decaying(), false, DType::kBF16, 2, KernelPath::kBest});
    check_against_reference({1000003, decaying(), true, DType::kF32, 2, KernelPath::kBest});
}

TEST(Adagrad, NoDecayAndInitialAccumulatorMatchScalarFormula) {
    AdagradOptions plain;  // PyTorch's defaults
    AdagradOptions init;
    init.initial_accumulator_value = 0.1;
    init.weight_decay = 0.01;
    init.eps = 1e-6;
    for (const AdagradOptions& o : {plain, init})
        for (int64_t n : {17, 70001})
            for (int threads : {1, 2})
                for (KernelPath path : {KernelPath::kBest, KernelPath::kPortable}) {
                    check_against_reference({n, o, true, DType::kBF16, threads, path});
                    check_against_reference({n, o, false, DType::kBF16, threads, path});
                }
}

// The AVX-512 path (where compiled) and the portable one give the same bits, NaN and infinity
// included, for every tail length.
TEST(Adagrad, PortablePathGivesTheSameBits) {
    if (!optim_detail::kHasAvx512Path) GTEST_SKIP() << "only the portable path here";
    AdagradOptions o = decaying();
    o.initial_accumulator_value = 0.5;
    for (int64_t n = 1; n <= 48; ++n)
        for (DType dt : {DType::kBF16, DType::kF16, DType::kF32}) {
            SCOPED_TRACE(testing::Message() << "n=" << n << " " << dtype_name(dt));
            std::mt19937 rng(77 + n);
            std::vector<float> p = spread_weights(n, rng), g = grads(n, rng);
            g[n / 2] = std::numeric_limits<float>::quiet_NaN();
            if (n > 3) g[1] = std::numeric_limits<float>::infinity();
            if (n > 5) p[3] = -std::numeric_limits<float>::infinity();
            std::vector<float> s(n, 0.0f), p2 = p, s2 = s;
            std::vector<float> c1(n, kUntouched32), c2(n, kUntouched32);
            for (int64_t t = 1; t <= 2; ++t) {
                const std::vector<OptimSegment> segs{{0, n, true}};
                adagrad_step(o, p.data(), g.data(), s.data(), n, segs, 1e-2f, t,
                             ComputeCopy{c1.data(), dt}, KernelPath::kBest);
                adagrad_step(o, p2.data(), g.data(), s2.data(), n, segs, 1e-2f, t,
                             ComputeCopy{c2.data(), dt}, KernelPath::kPortable);
            }
            EXPECT_EQ(first_diff(p, p2), -1) << "p";
            EXPECT_EQ(first_diff(s, s2), -1) << "sum";
            EXPECT_EQ(first_diff(c1, c2), -1) << "copy";
            EXPECT_TRUE(std::isnan(p[n / 2])) << "a NaN gradient reaches p";
        }
}

// The first step of plain Adagrad moves every weight by lr * g / (|g| + eps): about lr * sign(g).
TEST(Adagrad, FirstStepIsAboutSignTimesLr) {
    const int64_t n = 100;
    std::vector<float> p(n, 1.0f), g(n);
    for (int64_t i = 0; i < n; ++i) g[i] = float(i - 50) * 0.25f;
    MemoryPool pool;
    Adagrad opt(AdagradOptions{});
    opt.init_state(pool, n);
    const std::vector<OptimSegment> segs{{0, n, true}};
    opt.step(p.data(), g.data(), segs, 0.1f, 1);
    for (int64_t i = 0; i < n; ++i) {
        const float expect = g[i] == 0.0f ? 1.0f : g[i] > 0.0f ? 0.9f : 1.1f;
        EXPECT_NEAR(p[i], expect, 1e-6) << i;
    }
    auto state = opt.state();
    ASSERT_EQ(state.size(), 1u);
    EXPECT_EQ(state[0].first, "sum");
    EXPECT_EQ(state[0].second.data<float>()[60], g[60] * g[60]);
}

// The copy is what convert() of the master weights after the step gives.
TEST(Adagrad, CopyEqualsConvertAfterTheStep) {
    const int64_t n = 70001;
    for (DType dt : {DType::kBF16, DType::kF16}) {
        std::mt19937 rng(6);
        std::vector<float> p = spread_weights(n, rng), g = grads(n, rng);
        std::vector<uint16_t> fused(n), converted(n);
        const std::vector<OptimSegment> segs{{0, n, true}};
        MemoryPool pool;
        Adagrad opt(decaying());
        opt.init_state(pool, n);
        set_num_threads(2);
        opt.step(p.data(), g.data(), segs, 1e-2f, 1, ComputeCopy{fused.data(), dt});
        set_num_threads(1);
        convert(p.data(), DType::kF32, converted.data(), dt, size_t(n));
        EXPECT_EQ(first_diff(fused, converted), -1) << dtype_name(dt);
    }
}

TEST(Adagrad, RejectsBadOptions) {
    auto with = [](auto set) {
        AdagradOptions o;
        set(o);
        return o;
    };
    EXPECT_THROW(Adagrad(with([](AdagradOptions& o) { o.lr_decay = -1; })), Error);
    EXPECT_THROW(Adagrad(with([](AdagradOptions& o) { o.weight_decay = -1; })), Error);
    EXPECT_THROW(Adagrad(with([](AdagradOptions& o) { o.initial_accumulator_value = -1; })), Error);
    EXPECT_THROW(Adagrad(with([](AdagradOptions& o) { o.eps = -1; })), Error);
}

}  // namespace
}  // namespace zt
