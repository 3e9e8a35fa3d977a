// Causal attention kernels against a naive double reference that materializes the (T, T) scores,
// and the reference backward against central finite differences. Shapes cross the 64-row tile
// edge, T = 1, and head widths that are not a multiple of the 16-float vector.
#include "tensor/kernels/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "tensor/dtype.h"
#include "tensor/threads.h"
#include "util/error.h"

namespace zt::kernels {
namespace {

using Vd = std::vector<double>;

Vd random_values(int64_t n, unsigned seed, double range = 1.5) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<double> dist(-range, range);
    Vd v(static_cast<size_t>(n));
    for (double& x : v) x = dist(gen);
    return v;
}

// out: (B, T, C), lse: (B, H, T) of causal attention over qkv: (B, T, 3C), all in double.
void reference_forward(const Vd& qkv, AttentionShape s, Vd& out, Vd& lse) {
    const int64_t D = s.C / s.H, ld = 3 * s.C;
    const double scale = 1.0 / std::sqrt(static_cast<double>(D));
    out.assign(static_cast<size_t>(s.B * s.T * s.C), 0.0);
    lse.assign(static_cast<size_t>(s.B * s.H * s.T), 0.0);
    Vd sc(static_cast<size_t>(s.T));
    for (int64_t b = 0; b < s.B; ++b)
        for (int64_t h = 0; h < s.H; ++h)
            for (int64_t t = 0; t < s.T; ++t) {
                const double* q = &qkv[(b * s.T + t) * ld + h * D];
                double m = -INFINITY;
                for (int64_t u = 0; u <= t; ++u) {
                    const double* k = &qkv[(b * s.T + u) * ld + s.C + h * D];
                    double dot = 0.0;
                    for (int64_t e = 0; e < D; ++e) dot += q[e] * k[e];
                    sc[u] = dot * scale;
                    m = std::max(m, sc[u]);
                }
                double l = 0.0;
                for (int64_t u = 0; u <= t; ++u) l += std::exp(sc[u] - m);
                double* o = &out[(b * s.T + t) * s.C + h * D];
                for (int64_t u = 0; u <= t; ++u) {
                    const double p = std::exp(sc[u] - m) / l;
                    const double* v = &qkv[(b * s.T + u) * ld + 2 * s.C + h * D];
                    for (int64_t e = 0; e < D; ++e) o[e] += p * v[e];
                }
                lse[(b * s.H + h) * s.T + t] = m + std::log(l);
            }
}

// dqkv: (B, T, 3C) for dout: (B, T, C), from the materialized probabilities P.
Vd reference_backward(const Vd& qkv, const Vd& dout, AttentionShape s) {
    const int64_t D = s.C / s.H, ld = 3 * s.C, T = s.T;
    const double scale = 1.0 / std::sqrt(static_cast<double>(D));
    Vd out, lse, dqkv(qkv.size(), 0.0);
    reference_forward(qkv, s, out, lse);
    auto at = [&](int64_t b, int64_t t, int64_t part, int64_t h) {
        return (b * T + t) * ld + part * s.C + h * D;
    };
    for (int64_t b = 0; b < s.B; ++b)
        for (int64_t h = 0; h < s.H; ++h)
            for (int64_t t = 0; t < T; ++t) {
                const double* dot = &dout[(b * T + t) * s.C + h * D];
                const double* ot = &out[(b * T + t) * s.C + h * D];
                double di = 0.0;
                for (int64_t e = 0; e < D; ++e) di += dot[e] * ot[e];
                for (int64_t u = 0; u <= t; ++u) {
                    double qk = 0.0, dp = 0.0;
                    for (int64_t e = 0; e < D; ++e) {
                        qk += qkv[at(b, t, 0, h) + e] * qkv[at(b, u, 1, h) + e];
                        dp += dot[e] * qkv[at(b, u, 2, h) + e];
                    }
                    const double p = std::exp(qk * scale - lse[(b * s.H + h) * T + t]);
                    const double ds = p * (dp - di) * scale;
                    for (int64_t e = 0; e < D; ++e) {
                        dqkv[at(b, t, 0, h) + e] += ds * qkv[at(b, u, 1, h) + e];
                        dqkv[at(b, u, 1, h) + e] += ds * qkv[at(b, t, 0, h) + e];
                        dqkv[at(b, u, 2, h) + e] += p * dot[e];
                    }
                }
            }
    return dqkv;
}

// Exactly attention_workspace_bytes, so ASan sees any access past it; filled with NaN bytes so
// that reading scratch before writing it shows up in the results.
std::vector<char> workspace_for(AttentionShape s) {
    return std::vector<char>(static_cast<size_t>(attention_workspace_bytes(s, num_threads())),
                             static_cast<char>(0xff));
}

template <typename T>
std::vector<T> to_storage(const Vd& v) {
    std::vector<T> r(v.size());
    for (size_t i = 0; i < v.size(); ++i) r[i] = from_f32<T>(static_cast<float>(v[i]));
    return r;
}

template <typename T>
Vd to_double(const std::vector<T>& v) {
    Vd r(v.size());
    for (size_t i = 0; i < v.size(); ++i) r[i] = to_f32(v[i]);
    return r;
}

// max |got - want| / max(1, max |want|): one scale for a whole tensor, so small entries of a
// tensor with large ones are not held to a relative bound they cannot meet in f32.
double scaled_error(const Vd& got, const Vd& want) {
    EXPECT_EQ(got.size(), want.size());
    double err = 0.0, mag = 1.0;
    for (size_t i = 0; i < want.size(); ++i) {
        err = std::max(err, std::abs(got[i] - want[i]));  // NaN never compares larger: check it
        if (std::isnan(got[i])) return INFINITY;
        mag = std::max(mag, std::abs(want[i]));
    }
    return err / mag;
}

struct KernelResult {
    Vd out, lse, dqkv;
};

// Forward then backward with dout, in storage type T, on qkv and dout rounded to T.
template <typename T>
KernelResult run_kernels(const Vd& qkv, const Vd& dout, AttentionShape s,
                         AttentionMath math = AttentionMath::kWidened) {
    std::vector<T> x = to_storage<T>(qkv), dy = to_storage<T>(dout);
    std::vector<T> y(static_cast<size_t>(s.B * s.T * s.C), from_f32<T>(NAN));
    std::vector<T> dx(qkv.size(), from_f32<T>(NAN));
    std::vector<float> lse(static_cast<size_t>(s.B * s.H * s.T), NAN);
    std::vector<char> ws = workspace_for(s);
    attention_forward(x.data(), y.data(), lse.data(), s, ws.data(), math);
    ws.assign(ws.size(), static_cast<char>(0xff));
    attention_backward(x.data(), y.data(), dy.data(), lse.data(), dx.data(), s, ws.data(), math);
    return {to_double(y), Vd(lse.begin(), lse.end()), to_double(dx)};
}

// B, T, C, H: one 64-row tile or several with a partial last one; head widths 8, 24, 64, 80.
const AttentionShape kShapes[] = {
    {2, 37, 24, 3},  {1, 1, 16, 2},   {1, 130, 48, 2},
    {2, 70, 128, 2}, {1, 65, 160, 2}, {1, 64, 64, 1},
};

TEST(Attention, F32MatchesReference) {
    for (const AttentionShape& s : kShapes) {
        SCOPED_TRACE(testing::Message()
                     << "B=" << s.B << " T=" << s.T << " C=" << s.C << " H=" << s.H);
        Vd qkv = random_values(s.B * s.T * 3 * s.C, 1), dout = random_values(s.B * s.T * s.C, 2);
        Vd out, lse;
        reference_forward(qkv, s, out, lse);
        KernelResult k = run_kernels<float>(qkv, dout, s);
        // f32 storage and math against double: errors seen up to 4.1e-7.
        EXPECT_LT(scaled_error(k.out, out), 3e-6);
        EXPECT_LT(scaled_error(k.lse, lse), 3e-6);
        EXPECT_LT(scaled_error(k.dqkv, reference_backward(qkv, dout, s)), 3e-6);
    }
}

TEST(Attention, Bf16MatchesReferenceOnRoundedInputs) {
    for (const AttentionShape& s : kShapes) {
        SCOPED_TRACE(testing::Message()
                     << "B=" << s.B << " T=" << s.T << " C=" << s.C << " H=" << s.H);
        Vd qkv = to_double(to_storage<bf16>(random_values(s.B * s.T * 3 * s.C, 3)));
        Vd dout = to_double(to_storage<bf16>(random_values(s.B * s.T * s.C, 4)));
        Vd out, lse;
        reference_forward(qkv, s, out, lse);
        KernelResult k = run_kernels<bf16>(qkv, dout, s);
        // Outputs are rounded to bf16 (relative 2^-9 = 2e-3); lse stays f32. Backward also reads
        // the bf16-rounded out for D_t = dout_t . out_t. Errors seen: out up to 2.7e-3, lse
        // 1.2e-7, dqkv up to 3.6e-3.
        EXPECT_LT(scaled_error(k.out, out), 4e-3);
        EXPECT_LT(scaled_error(k.lse, lse), 3e-6);
        EXPECT_LT(scaled_error(k.dqkv, reference_backward(qkv, dout, s)), 8e-3);
    }
}

// Note [bf16 dot products in attention]: the same inputs through bf16 dot products, where this
// build has them. P and dS are rounded to bf16 as well, so the bounds are wider than the widened
// kernel's.
TEST(Attention, Bf16DotProductsMatchReferenceOnRoundedInputs) {
    if (!attention_dot_available()) GTEST_SKIP() << "built without AVX512_BF16";
    for (const AttentionShape& s : kShapes) {
        SCOPED_TRACE(testing::Message()
                     << "B=" << s.B << " T=" << s.T << " C=" << s.C << " H=" << s.H);
        Vd qkv = to_double(to_storage<bf16>(random_values(s.B * s.T * 3 * s.C, 3)));
        Vd dout = to_double(to_storage<bf16>(random_values(s.B * s.T * s.C, 4)));
        Vd out, lse;
        reference_forward(qkv, s, out, lse);
        KernelResult k = run_kernels<bf16>(qkv, dout, s, AttentionMath::kDot);
        EXPECT_LT(scaled_error(k.out, out), 6e-3);
        EXPECT_LT(scaled_error(k.lse, lse), 3e-6);
        EXPECT_LT(scaled_error(k.dqkv, reference_backward(qkv, dout, s)), 1.2e-2);
        // Not the widened kernel's bits: the dot path really ran.
        if (s.T > 1) {
            EXPECT_NE(k.dqkv, run_kernels<bf16>(qkv, dout, s).dqkv);
        }
    }
}

// sum(W * out) in double, for finite differences.
double weighted_loss(const Vd& qkv, const Vd& w, AttentionShape s) {
    Vd out, lse;
    reference_forward(qkv, s, out, lse);
    double l = 0.0;
    for (size_t i = 0; i < out.size(); ++i) l += w[i] * out[i];
    return l;
}

Vd finite_difference_grad(const Vd& qkv, const Vd& w, AttentionShape s) {
    const double eps = 1e-5;  // central differences in double: error O(eps^2) ~ 1e-10
    Vd g(qkv.size()), x = qkv;
    for (size_t i = 0; i < x.size(); ++i) {
        x[i] = qkv[i] + eps;
        const double up = weighted_loss(x, w, s);
        x[i] = qkv[i] - eps;
        const double down = weighted_loss(x, w, s);
        x[i] = qkv[i];
        g[i] = (up - down) / (2 * eps);
    }
    return g;
}

TEST(Attention, BackwardMatchesFiniteDifferences) {
    // Every qkv element is perturbed, two reference forwards each: kept small to stay fast.
    const AttentionShape shapes[] = {{1, 37, 24, 3}, {1, 1, 8, 1}, {2, 19, 12, 2}};
    for (const AttentionShape& s : shapes) {
        SCOPED_TRACE(testing::Message()
                     << "B=" << s.B << " T=" << s.T << " C=" << s.C << " H=" << s.H);
        Vd qkv = random_values(s.B * s.T * 3 * s.C, 5), w = random_values(s.B * s.T * s.C, 6);
        Vd fd = finite_difference_grad(qkv, w, s);
        EXPECT_LT(scaled_error(reference_backward(qkv, w, s), fd), 1e-8);
        // The f32 kernel: errors seen up to 2.3e-7.
        EXPECT_LT(scaled_error(run_kernels<float>(qkv, w, s).dqkv, fd), 3e-6);
        // The bf16 kernel on the same, unrounded inputs: rounding qkv and W to bf16 (2^-9
        // relative each) dominates; errors seen up to 3.7e-3.
        EXPECT_LT(scaled_error(run_kernels<bf16>(qkv, w, s).dqkv, fd), 1e-2);
        if (attention_dot_available()) {  // and with P and dS rounded to bf16 too
            EXPECT_LT(scaled_error(run_kernels<bf16>(qkv, w, s, AttentionMath::kDot).dqkv, fd),
                      1.5e-2);
        }
    }
}

TEST(Attention, WorkspaceGrowsLinearlyWithT) {
    for (int threads : {1, 2}) {
        for (int64_t T : {256, 512}) {
            const int64_t at_t = attention_workspace_bytes({2, T, 64, 4}, threads);
            const int64_t at_2t = attention_workspace_bytes({2, 2 * T, 64, 4}, threads);
            EXPECT_LE(static_cast<double>(at_2t), 2.1 * static_cast<double>(at_t)) << "T=" << T;
        }
    }
}

TEST(Attention, StaysInsideAMisalignedWorkspace) {
    const AttentionShape s{2, 70, 96, 3};
    const int64_t bytes = attention_workspace_bytes(s, num_threads());
    const size_t guard = 256;
    // Starts 1 byte past an allocation; the guard bytes after `bytes` must stay untouched.
    std::vector<unsigned char> buf(1 + static_cast<size_t>(bytes) + guard, 0xa5);
    void* ws = buf.data() + 1;
    Vd qkv = random_values(s.B * s.T * 3 * s.C, 7), dout = random_values(s.B * s.T * s.C, 8);
    std::vector<float> x(qkv.begin(), qkv.end()), dy(dout.begin(), dout.end());
    std::vector<float> y(static_cast<size_t>(s.B * s.T * s.C)), dx(x.size());
    std::vector<float> lse(static_cast<size_t>(s.B * s.H * s.T));
    attention_forward(x.data(), y.data(), lse.data(), s, ws);
    attention_backward(x.data(), y.data(), dy.data(), lse.data(), dx.data(), s, ws);
    EXPECT_EQ(buf[0], 0xa5);
    for (size_t i = 1 + static_cast<size_t>(bytes); i < buf.size(); ++i)
        ASSERT_EQ(buf[i], 0xa5) << i;
    EXPECT_LT(scaled_error(Vd(dx.begin(), dx.end()), reference_backward(qkv, dout, s)), 3e-6);
}

template <typename T>
void expect_same_bits_on_two_threads(AttentionMath math = AttentionMath::kWidened) {
    // B H = 6 heads over 2 threads, and B H = 1 (one thread idles).
    for (AttentionShape s : {AttentionShape{2, 130, 192, 3}, AttentionShape{1, 37, 24, 1}}) {
        Vd qkv = random_values(s.B * s.T * 3 * s.C, 9), dout = random_values(s.B * s.T * s.C, 10);
        KernelResult one = run_kernels<T>(qkv, dout, s, math);
        set_num_threads(2);
        KernelResult two = run_kernels<T>(qkv, dout, s, math);
        set_num_threads(1);
        // Each head is computed whole by one thread in a fixed order, so the bits cannot depend on
        // the thread count.
        EXPECT_EQ(one.out, two.out);
        EXPECT_EQ(one.lse, two.lse);
        EXPECT_EQ(one.dqkv, two.dqkv);
    }
}

TEST(Attention, TwoThreadsGiveTheSameBitsF32) { expect_same_bits_on_two_threads<float>(); }
TEST(Attention, TwoThreadsGiveTheSameBitsBf16) { expect_same_bits_on_two_threads<bf16>(); }
TEST(Attention, TwoThreadsGiveTheSameBitsBf16Dot) {
    if (!attention_dot_available()) GTEST_SKIP() << "built without AVX512_BF16";
    expect_same_bits_on_two_threads<bf16>(AttentionMath::kDot);
}

// Both kernels stay inside the workspace size, which does not depend on which runs.
TEST(Attention, Bf16DotStaysInsideAMisalignedWorkspace) {
    if (!attention_dot_available()) GTEST_SKIP() << "built without AVX512_BF16";
    const AttentionShape s{2, 70, 96, 3};
    const int64_t bytes = attention_workspace_bytes(s, num_threads());
    const size_t guard = 256;
    std::vector<unsigned char> buf(1 + static_cast<size_t>(bytes) + guard, 0xa5);
    void* ws = buf.data() + 1;
    Vd qkv = to_double(to_storage<bf16>(random_values(s.B * s.T * 3 * s.C, 7)));
    Vd dout = to_double(to_storage<bf16>(random_values(s.B * s.T * s.C, 8)));
    std::vector<bf16> x = to_storage<bf16>(qkv), dy = to_storage<bf16>(dout);
    std::vector<bf16> y(static_cast<size_t>(s.B * s.T * s.C)), dx(x.size());
    std::vector<float> lse(static_cast<size_t>(s.B * s.H * s.T));
    attention_forward(x.data(), y.data(), lse.data(), s, ws, AttentionMath::kDot);
    attention_backward(x.data(), y.data(), dy.data(), lse.data(), dx.data(), s, ws,
                       AttentionMath::kDot);
    EXPECT_EQ(buf[0], 0xa5);
    for (size_t i = 1 + static_cast<size_t>(bytes); i < buf.size(); ++i)
        ASSERT_EQ(buf[i], 0xa5) << i;
    EXPECT_LT(scaled_error(to_double(dx), reference_backward(qkv, dout, s)), 1.2e-2);
}

TEST(Attention, RejectsCNotAMultipleOfH) {
    EXPECT_THROW(attention_workspace_bytes({1, 4, 10, 3}, 1), Error);
}

// ZT_ATTENTION: unset is the measured choice, "dot" and "widened" as said, anything else and a
// "dot" the build cannot run are refused, naming the variable.
TEST(Attention, MathFromTheEnvironment) {
    EXPECT_EQ(attention_math_from_env(nullptr, true), AttentionMath::kAuto);
    EXPECT_EQ(attention_math_from_env("", false), AttentionMath::kAuto);
    EXPECT_EQ(attention_math_from_env("dot", true), AttentionMath::kDot);
    EXPECT_EQ(attention_math_from_env("widened", false), AttentionMath::kWidened);
    for (const auto& [v, avail] : {std::pair<const char*, bool>{"dot", false}, {"fast", true}}) {
        try {
            attention_math_from_env(v, avail);
            ADD_FAILURE() << v << " accepted";
        } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::kInput);
            EXPECT_NE(e.message().find("ZT_ATTENTION"), std::string::npos) << e.message();
        }
    }
}

}  // namespace
}  // namespace zt::kernels
