// The fused Lion step (optim/lion.h) against a plain scalar loop of Note [Lion op order], written
// here from lion-pytorch's update_fn and PyTorch's CPU ops, bit for bit: p, exp_avg and the compute
// copy (bf16, f16, f32, none), sizes around the vector width and one far above the parallel
// threshold, decay and no-decay segments, thread counts 1 and 2, the AVX-512 and portable paths.
#include "optim/lion.h"

#include <gtest/gtest.h>

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
    std::vector<float> p, m;
    CopyBuffers copy;
};

// torch.sign on CPU: (0 < a) - (a < 0), so 0 for zeros and NaN.
float torch_sign(float a) { return float(int(0.0f < a) - int(a < 0.0f)); }

// One step of lion-pytorch's update_fn on f32 tensors with Python (double) scalars; no FMA
// (ZT_OPTIM_NO_CONTRACT), one element at a time.
ZT_OPTIM_KERNEL void ref_step(RefState& s, const std::vector<float>& g,
                              const std::vector<OptimSegment>& segs, const LionOptions& o, float lr,
                              DType copy_dtype, bool copy) {
    ZT_OPTIM_NO_CONTRACT
    const float decay = float(1.0 - double(lr) * o.weight_decay);  // p.mul_(1 - lr * wd)
    const float b1 = float(o.beta1);                               // m.clone().mul_(beta1)
    const float w1 = float(1.0 - o.beta1);                         //   .add(g, alpha=1 - beta1)
    const float neg_lr = float(-double(lr));                       // p.add_(u, alpha=-lr)
    const float b2 = float(o.beta2);                               // m.mul_(beta2)
    const float w2 = float(1.0 - o.beta2);                         //   .add_(g, alpha=1 - beta2)
    for (const OptimSegment& seg : segs) {
        for (int64_t i = seg.offset; i < seg.offset + seg.numel; ++i) {
            float pi = s.p[i];
            const float gi = g[i];
            const float mi = s.m[i];
            if (seg.decay && o.weight_decay != 0.0) pi = pi * decay;
            const float u = torch_sign(mi * b1 + w1 * gi);
            pi = pi + neg_lr * u;
            s.m[i] = mi * b2 + w2 * gi;
            s.p[i] = pi;
            s.copy.write(i, pi, copy, copy_dtype);
        }
    }
}

struct Case {
    int64_t n;
    LionOptions o;
    bool copy;
    DType dtype;
    int threads;
    KernelPath path;
};

// Runs 4 steps through the optimizer (kBest: Lion::step over in-memory state; kPortable:
// lion_step over the test's buffers) and through ref_step, then compares every bit.
void check_against_reference(const Case& k) {
    SCOPED_TRACE(testing::Message()
                 << "n=" << k.n << " betas=" << k.o.beta1 << "," << k.o.beta2
                 << " wd=" << k.o.weight_decay
                 << " copy=" << (k.copy ? dtype_name(k.dtype) : "none") << " threads=" << k.threads
                 << " path=" << (k.path == KernelPath::kBest ? "best" : "portable"));
    std::mt19937 rng(8765 + k.n);
    std::vector<float> p = spread_weights(k.n, rng);
    std::vector<float> m(k.n, 0.0f);
    CopyBuffers copy(k.n);
    RefState ref{p, m, copy};
    const std::vector<OptimSegment> segs = odd_segments(k.n);

    set_num_threads(k.threads);
    ASSERT_EQ(team_size(), k.threads);
    MemoryPool pool;
    Lion opt(k.o);
    opt.init_state(pool, k.n);
    for (int64_t t = 1; t <= 4; ++t) {
        const std::vector<float> g = grads(k.n, rng);
        const float lr = 1e-4f * float(t);  // changes per step, like a schedule
        const ComputeCopy cc = copy.as(k.copy, k.dtype);
        if (k.path == KernelPath::kBest)
            opt.step(p.data(), g.data(), segs, lr, t, cc);
        else
            lion_step(k.o, p.data(), g.data(), m.data(), k.n, segs, lr, t, cc, k.path);
        ref_step(ref, g, segs, k.o, lr, k.dtype, k.copy);
    }
    set_num_threads(1);
    if (k.path == KernelPath::kBest) m = opt.state()[0].second.to_vector();
    EXPECT_EQ(first_diff(p, ref.p), -1) << "p";
    EXPECT_EQ(first_diff(m, ref.m), -1) << "exp_avg";
    EXPECT_EQ(first_diff(copy.c16, ref.copy.c16), -1) << "16-bit copy";
    EXPECT_EQ(first_diff(copy.c32, ref.copy.c32), -1) << "f32 copy";
}

LionOptions decaying() {
    LionOptions o;
    o.weight_decay = 1.0;  // Lion's weight decay runs 3-10x AdamW's (the paper)
    return o;
}

TEST(Lion, MatchesScalarFormulaBitForBit) {
    for (int64_t n : {1, 15, 16, 17, 33, 1031})
        for (DType dt : {DType::kBF16, DType::kF16, DType::kF32})
            for (int threads : {1, 2})
                for (KernelPath path : {KernelPath::kBest, KernelPath::kPortable})
                    check_against_reference({n, decaying(), true, dt, threads, path});
}

// 1000003 elements: far above the parallel threshold, odd, so each thread's share ends in a tail.
TEST(Lion, LargeOddRangeMatchesScalarFormulaOverThreadsAndPaths) {
    for (DType dt : {DType::kBF16, DType::kF16})
        for (int threads : {1, 2})
            for (KernelPath path : {KernelPath::kBest, KernelPath::kPortable})
                check_against_reference({1000003, decaying(), true, dt, threads, path});
    check_against_reference({1000003, decaying(), false, DType::kBF16, 2, KernelPath::kBest});
    check_against_reference({1000003, decaying(), true, DType::kF32, 2, KernelPath::kBest});
}

TEST(Lion, NoDecayAndOtherBetasMatchScalarFormula) {
    LionOptions plain;  // lion-pytorch's defaults
    LionOptions other;
    other.beta1 = 0.95;
    other.beta2 = 0.98;
    other.weight_decay = 0.1;
    for (const LionOptions& o : {plain, other})
        for (int64_t n : {17, 70001})
            for (int threads : {1, 2})
                for (KernelPath path : {KernelPath::kBest, KernelPath::kPortable}) {
                    check_against_reference({n, o, true, DType::kBF16, threads, path});
                    check_against_reference({n, o, false, DType::kBF16, threads, path});
                }
}

// The AVX-512 path (where compiled) and the portable one give the same bits, NaN, infinity and
// zero gradients included, for every tail length.
TEST(Lion, PortablePathGivesTheSameBits) {
    if (!optim_detail::kHasAvx512Path) GTEST_SKIP() << "only the portable path here";
    const LionOptions o = decaying();
    for (int64_t n = 1; n <= 48; ++n)
        for (DType dt : {DType::kBF16, DType::kF16, DType::kF32}) {
            SCOPED_TRACE(testing::Message() << "n=" << n << " " << dtype_name(dt));
            std::mt19937 rng(55 + n);
            std::vector<float> p = spread_weights(n, rng), g = grads(n, rng);
            g[n / 2] = std::numeric_limits<float>::quiet_NaN();
            if (n > 3) g[1] = std::numeric_limits<float>::infinity();
            if (n > 5) p[3] = -std::numeric_limits<float>::infinity();
            if (n > 7) g[0] = -0.0f;
            std::vector<float> m(n, 0.0f), p2 = p, m2 = m;
            std::vector<float> c1(n, kUntouched32), c2(n, kUntouched32);
            for (int64_t t = 1; t <= 2; ++t) {
                const std::vector<OptimSegment> segs{{0, n, true}};
                lion_step(o, p.data(), g.data(), m.data(), n, segs, 1e-4f, t,
                          ComputeCopy{c1.data(), dt}, KernelPath::kBest);
                lion_step(o, p2.data(), g.data(), m2.data(), n, segs, 1e-4f, t,
                          ComputeCopy{c2.data(), dt}, KernelPath::kPortable);
            }
            EXPECT_EQ(first_diff(p, p2), -1) << "p";
            EXPECT_EQ(first_diff(m, m2), -1) << "exp_avg";
            EXPECT_EQ(first_diff(c1, c2), -1) << "copy";
            EXPECT_TRUE(std::isnan(m[n / 2])) << "a NaN gradient reaches exp_avg";
        }
}

// With zero momentum the first step is p * (1 - lr*wd) - lr * sign(g), and a zero gradient
// moves no weight (sign(0) = 0); exp_avg becomes (1 - beta2) * g.
TEST(Lion, FirstStepIsDecayThenSignTimesLr) {
    const int64_t n = 101;
    std::vector<float> p(n), g(n);
    for (int64_t i = 0; i < n; ++i) {
        p[i] = 1.0f + float(i) / 64.0f;
        g[i] = float(i - 50) * 0.5f;
    }
    const std::vector<float> p0 = p;
    MemoryPool pool;
    LionOptions o;
    o.weight_decay = 0.5;
    Lion opt(o);
    opt.init_state(pool, n);
    const float lr = 0.125f;
    const std::vector<OptimSegment> segs{{0, 50, true}, {50, 51, false}};
    opt.step(p.data(), g.data(), segs, lr, 1);
    const float decay = float(1.0 - 0.125 * 0.5);
    for (int64_t i = 0; i < n; ++i) {
        const float sign = g[i] > 0.0f ? 1.0f : g[i] < 0.0f ? -1.0f : 0.0f;
        volatile float decayed = i < 50 ? p0[i] * decay : p0[i];  // rounded: no FMA below
        EXPECT_EQ(p[i], decayed - lr * sign) << i;
    }
    auto state = opt.state();
    ASSERT_EQ(state.size(), 1u);
    EXPECT_EQ(state[0].first, "exp_avg");
    EXPECT_EQ(state[0].second.data<float>()[52], float(1.0 - 0.99) * g[52]);
    EXPECT_EQ(opt.name(), "Lion");
}

// The copy is what convert() of the master weights after the step gives.
TEST(Lion, CopyEqualsConvertAfterTheStep) {
    const int64_t n = 70001;
    for (DType dt : {DType::kBF16, DType::kF16}) {
        std::mt19937 rng(7);
        std::vector<float> p = spread_weights(n, rng), g = grads(n, rng);
        std::vector<uint16_t> fused(n), converted(n);
        const std::vector<OptimSegment> segs{{0, n, true}};
        MemoryPool pool;
        Lion opt(decaying());
        opt.init_state(pool, n);
        set_num_threads(2);
        opt.step(p.data(), g.data(), segs, 1e-4f, 1, ComputeCopy{fused.data(), dt});
        set_num_threads(1);
        convert(p.data(), DType::kF32, converted.data(), dt, size_t(n));
        EXPECT_EQ(first_diff(fused, converted), -1) << dtype_name(dt);
    }
}

TEST(Lion, RejectsBadOptions) {
    LionOptions o;
    o.beta1 = 1.5;
    EXPECT_THROW(Lion{o}, Error);
    o = LionOptions{};
    o.beta2 = -0.1;
    EXPECT_THROW(Lion{o}, Error);
    o = LionOptions{};
    o.weight_decay = -1.0;
    EXPECT_THROW(Lion{o}, Error);
}

}  // namespace
}  // namespace zt
