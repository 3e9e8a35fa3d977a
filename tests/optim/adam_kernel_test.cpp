// The fused AdamW/Adam step (optim/adam_kernel.h through adamw_step and AdamW::step) against a
// plain scalar loop of Note [AdamW op order], written here from PyTorch's ops (its lerp literally),
// bit for bit: p, m, v and the compute copy (bf16, f16, f32), sizes around the vector width and
// odd sizes above the parallel threshold, thread counts 1 and 2, the AVX-512 and portable paths.
#include "optim/adam_kernel.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "optim/adamw.h"
#include "optim/segment_partition.h"
#include "tensor/threads.h"

namespace zt {
namespace {

struct State {
    std::vector<float> p, m, v;
    std::vector<uint16_t> copy16;  // bf16 or f16 bits
    std::vector<float> copy32;
};

// One step of torch.optim.AdamW / Adam (single-tensor, foreach=False) as PyTorch runs it on f32
// tensors with Python (double) scalars; no FMA (ZT_OPTIM_NO_CONTRACT), one element at a time.
ZT_OPTIM_KERNEL void ref_step(State& s, const std::vector<float>& g,
                              const std::vector<OptimSegment>& segs, const AdamWOptions& o,
                              float lr, int64_t t, DType copy_dtype, bool copy) {
    ZT_OPTIM_NO_CONTRACT
    const double bc1 = o.bias_correction ? 1.0 - std::pow(o.beta1, double(t)) : 1.0;
    const double bc2 = o.bias_correction ? 1.0 - std::pow(o.beta2, double(t)) : 1.0;
    const float decay = float(1.0 - double(lr) * o.weight_decay);  // p.mul_(1 - lr * wd)
    const float wd = float(o.weight_decay);                        // grad.add(p, alpha=wd)
    const float w = float(1.0 - o.beta1);                          // exp_avg.lerp_(grad, 1 - b1)
    const float b2 = float(o.beta2);                               // exp_avg_sq.mul_(b2)
    const float one_minus_b2 = float(1.0 - o.beta2);               // .addcmul_(g, g, 1 - b2)
    const float bc2_sqrt = float(std::sqrt(bc2));                  // (sqrt(v) / sqrt(bc2))
    const float eps = float(o.eps);                                //   .add_(eps)
    const float neg_step = float(-(double(lr) / bc1));             // p.addcdiv_(m, d, -lr/bc1)
    for (const OptimSegment& seg : segs) {
        for (int64_t i = seg.offset; i < seg.offset + seg.numel; ++i) {
            float pi = s.p[i];
            float gi = g[i];
            if (seg.decay && o.weight_decay != 0.0) {
                if (o.adam_w_mode)
                    pi = pi * decay;
                else
                    gi = gi + wd * pi;
            }
            const float mi = s.m[i];
            // at::lerp: start + w*(end - start) for |w| < 0.5, else end - (end - start)*(1 - w)
            const float mn = std::fabs(w) < 0.5f ? mi + w * (gi - mi) : gi - (gi - mi) * (1.0f - w);
            float vn = s.v[i] * b2;
            vn = vn + (one_minus_b2 * gi) * gi;
            const float denom = std::sqrt(vn) / bc2_sqrt + eps;
            const float pn = pi + (neg_step * mn) / denom;
            s.m[i] = mn;
            s.v[i] = vn;
            s.p[i] = pn;
            if (!copy) continue;
            if (copy_dtype == DType::kBF16) s.copy16[i] = f32_to_bf16(pn).bits;
            if (copy_dtype == DType::kF16) s.copy16[i] = f32_to_f16(pn).bits;
            if (copy_dtype == DType::kF32) s.copy32[i] = pn;
        }
    }
}

// Weights over many magnitudes (1e-9 .. 1e5), so the copies meet f16 subnormals and overflow and
// bf16 ties; a few f32 denormals.
std::vector<float> spread_weights(int64_t n, std::mt19937& rng) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_real_distribution<float> expo(-9.0f, 5.0f);
    std::vector<float> p(n);
    for (int64_t i = 0; i < n; ++i) p[i] = normal(rng) * std::pow(10.0f, expo(rng));
    for (int64_t i = 5; i < n; i += 97) p[i] = 3e-40f * float(i % 5 - 2);  // denormal or zero
    return p;
}

std::vector<float> grads(int64_t n, std::mt19937& rng) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> g(n);
    for (int64_t i = 0; i < n; ++i) g[i] = normal(rng) * (i % 7 == 3 ? 1e-8f : 1.0f);
    return g;
}

// Segments of odd lengths, decay on and off, with gaps between some (elements no segment covers
// must stay untouched, the copy included).
std::vector<OptimSegment> odd_segments(int64_t n) {
    std::vector<OptimSegment> segs;
    const int64_t sizes[] = {13, 5, 101, 1, 29, 3};
    int64_t off = 0;
    for (int k = 0; off < n; ++k) {
        const int64_t len = std::min<int64_t>(sizes[k % 6] * (1 + n / 300), n - off);
        segs.push_back({off, len, k % 2 == 0});
        off += len + (k % 4 == 3 ? 2 : 0);  // a gap of 2 after every fourth segment
    }
    return segs;
}

bool same_bits(const void* a, const void* b, size_t bytes) { return std::memcmp(a, b, bytes) == 0; }

template <typename T>
int64_t first_diff(const std::vector<T>& a, const std::vector<T>& b) {
    for (size_t i = 0; i < a.size(); ++i)
        if (!same_bits(&a[i], &b[i], sizeof(T))) return int64_t(i);
    return -1;
}

constexpr uint16_t kUntouched16 = 0x1234;
constexpr float kUntouched32 = -12345.0f;

struct Case {
    int64_t n;
    AdamWOptions o;
    bool copy;
    DType dtype;
    int threads;
};

// Runs 3 steps through AdamW::step and through ref_step, then compares every bit.
void check_against_reference(const Case& k) {
    SCOPED_TRACE(testing::Message()
                 << "n=" << k.n << " adam_w_mode=" << k.o.adam_w_mode << " beta1=" << k.o.beta1
                 << " copy=" << (k.copy ? dtype_name(k.dtype) : "none")
                 << " threads=" << k.threads);
    std::mt19937 rng(1234 + k.n);
    State fused, ref;
    fused.p = spread_weights(k.n, rng);
    fused.copy16.assign(k.n, kUntouched16);
    fused.copy32.assign(k.n, kUntouched32);
    ref = fused;
    ref.m.assign(k.n, 0.0f);
    ref.v.assign(k.n, 0.0f);
    const std::vector<OptimSegment> segs = odd_segments(k.n);

    set_num_threads(k.threads);
    int team = 0;  // the step's parallel region really splits the range at 2 threads
#pragma omp parallel
#pragma omp single
    team = omp_get_num_threads();
    ASSERT_EQ(team, k.threads);
    MemoryPool pool;
    AdamW opt(k.o);
    opt.init_state(pool, k.n);
    ComputeCopy copy;
    if (k.copy) {
        copy.dtype = k.dtype;
        copy.data = k.dtype == DType::kF32 ? static_cast<void*>(fused.copy32.data())
                                           : static_cast<void*>(fused.copy16.data());
    }
    for (int64_t t = 1; t <= 3; ++t) {
        const std::vector<float> g = grads(k.n, rng);
        const float lr = 1e-3f * float(t);  // changes per step, like a schedule
        opt.step(fused.p.data(), g.data(), segs, lr, t, copy);
        ref_step(ref, g, segs, k.o, lr, t, k.dtype, k.copy);
    }
    set_num_threads(1);
    fused.m = opt.state()[0].second.to_vector();
    fused.v = opt.state()[1].second.to_vector();
    EXPECT_EQ(first_diff(fused.p, ref.p), -1) << "p";
    EXPECT_EQ(first_diff(fused.m, ref.m), -1) << "m";
    EXPECT_EQ(first_diff(fused.v, ref.v), -1) << "v";
    EXPECT_EQ(first_diff(fused.copy16, ref.copy16), -1) << "16-bit copy";
    EXPECT_EQ(first_diff(fused.copy32, ref.copy32), -1) << "f32 copy";
}

const int64_t kSizes[] = {1, 15, 16, 17, 31, 33, 1031, 70001};  // 70001: above the threshold

TEST(AdamKernel, AdamWMatchesScalarFormulaBitForBit) {
    AdamWOptions o;
    o.beta1 = 0.9;
    o.beta2 = 0.95;
    o.weight_decay = 0.1;
    for (int64_t n : kSizes)
        for (DType dt : {DType::kBF16, DType::kF16})
            for (int threads : {1, 2}) check_against_reference({n, o, true, dt, threads});
}

TEST(AdamKernel, NoCopyAndF32CopyMatchScalarFormula) {
    AdamWOptions o;
    o.weight_decay = 0.01;
    for (int64_t n : {17, 70001})
        for (int threads : {1, 2}) {
            check_against_reference({n, o, false, DType::kBF16, threads});
            check_against_reference({n, o, true, DType::kF32, threads});
        }
}

TEST(AdamKernel, AdamL2AndLargeLerpWeightMatchScalarFormula) {
    AdamWOptions l2;
    l2.adam_w_mode = false;
    l2.weight_decay = 0.05;
    AdamWOptions lerp;  // lerp weight 0.7 >= 0.5: PyTorch's other lerp branch
    lerp.beta1 = 0.3;
    lerp.beta2 = 0.99;
    lerp.eps = 1e-6;
    lerp.weight_decay = 0.01;
    lerp.bias_correction = false;
    for (const AdamWOptions& o : {l2, lerp})
        for (int64_t n : {33, 70001})
            for (int threads : {1, 2}) check_against_reference({n, o, true, DType::kBF16, threads});
}

// The AVX-512 path (where compiled) and the portable one give the same bits, NaN and infinity
// included, for every tail length.
TEST(AdamKernel, PortablePathGivesTheSameBits) {
    if (!optim_detail::adam_has_avx512_path()) GTEST_SKIP() << "only the portable path here";
    AdamWOptions o;
    o.weight_decay = 0.1;
    for (int64_t n = 1; n <= 48; ++n)
        for (DType dt : {DType::kBF16, DType::kF16, DType::kF32}) {
            SCOPED_TRACE(testing::Message() << "n=" << n << " " << dtype_name(dt));
            std::mt19937 rng(99 + n);
            std::vector<float> p = spread_weights(n, rng), g = grads(n, rng);
            g[n / 2] = std::numeric_limits<float>::quiet_NaN();
            if (n > 3) g[1] = std::numeric_limits<float>::infinity();
            if (n > 5) p[3] = -std::numeric_limits<float>::infinity();
            std::vector<float> m(n, 0.5f), v(n, 0.25f);
            std::vector<float> p2 = p, m2 = m, v2 = v;
            std::vector<float> c1(n, kUntouched32), c2(n, kUntouched32);
            MemoryPool pool;
            for (int64_t t = 1; t <= 2; ++t) {
                const std::vector<OptimSegment> segs{{0, n, true}};
                adamw_step(o, p.data(), g.data(), m.data(), v.data(), n, segs, 1e-3f, t,
                           ComputeCopy{c1.data(), dt});
                const optim_detail::AdamRange r{p2.data(), g.data(),  m2.data(),
                                                v2.data(), c2.data(), n};
                const optim_detail::AdamCoefs c = optim_detail::adam_coefs(o, 1e-3f, t);
                optim_detail::adam_update_range(r, optim_detail::AdamDecay::kDecoupled, dt, c,
                                                optim_detail::KernelPath::kPortable);
            }
            EXPECT_EQ(first_diff(p, p2), -1) << "p";
            EXPECT_EQ(first_diff(m, m2), -1) << "m";
            EXPECT_EQ(first_diff(v, v2), -1) << "v";
            EXPECT_EQ(first_diff(c1, c2), -1) << "copy";
            EXPECT_TRUE(std::isnan(p[n / 2])) << "a NaN gradient reaches p";
        }
}

// The copy is what the engine's convert() of the master weights gives today (sync_compute), so a
// fused step can replace the step + convert pair without changing a bit.
TEST(AdamKernel, CopyEqualsConvertAfterTheStep) {
    const int64_t n = 70001;
    for (DType dt : {DType::kBF16, DType::kF16}) {
        std::mt19937 rng(5);
        std::vector<float> p = spread_weights(n, rng), g = grads(n, rng);
        std::vector<uint16_t> fused(n), converted(n);
        const std::vector<OptimSegment> segs{{0, n, true}};
        MemoryPool pool;
        AdamW opt(AdamWOptions{});
        opt.init_state(pool, n);
        set_num_threads(2);
        opt.step(p.data(), g.data(), segs, 1e-3f, 1, ComputeCopy{fused.data(), dt});
        set_num_threads(1);
        convert(p.data(), DType::kF32, converted.data(), dt, size_t(n));
        EXPECT_EQ(first_diff(fused, converted), -1) << dtype_name(dt);
    }
}

}  // namespace
}  // namespace zt
