// f16 storage: the vector loads and stores (vec16.h) against the scalar conversions of dtype.h,
// the f16 GEMM path against f32 GEMM and a double reference, and every kernel's f16 instantiation
// against its f32 one run on the same f16-rounded inputs. Kernels compute in f32 and round once
// on store, so an f16 output must be exactly the f32 kernel's output rounded to f16, and an f32
// output (statistics, parameter gradients) exactly the f32 kernel's. Sizes are odd: partial
// vectors everywhere.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tensor/dtype.h"
#include "tensor/gemm.h"
#include "tensor/kernels/attention.h"
#include "tensor/kernels/bias.h"
#include "tensor/kernels/cross_entropy.h"
#include "tensor/kernels/elementwise.h"
#include "tensor/kernels/embedding.h"
#include "tensor/kernels/gelu.h"
#include "tensor/kernels/layernorm.h"
#include "tensor/kernels/softmax.h"
#include "tensor/kernels/vec16.h"
#include "tensor/tensor.h"
#include "tensor/threads.h"

namespace zt {
namespace {

std::vector<f16> random_f16(size_t n, uint32_t seed, float lo, float hi) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(lo, hi);
    std::vector<f16> v(n);
    for (f16& e : v) e = f32_to_f16(u(rng));
    return v;
}

std::vector<float> widen(const std::vector<f16>& v) {
    std::vector<float> w(v.size());
    for (size_t i = 0; i < v.size(); ++i) w[i] = f16_to_f32(v[i]);
    return w;
}

// f16 outputs must be the f32 outputs rounded to f16, bit for bit.
void expect_rounded(const std::vector<f16>& got, const std::vector<float>& f32_out,
                    const std::string& what) {
    ASSERT_EQ(got.size(), f32_out.size()) << what;
    int bad = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        const uint16_t want = f32_to_f16(f32_out[i]).bits;
        if (got[i].bits != want && bad++ < 5)
            ADD_FAILURE() << what << "[" << i << "]: got " << f16_to_f32(got[i]) << ", want "
                          << f16_to_f32(f16{want}) << " (f32 " << f32_out[i] << ")";
    }
    EXPECT_EQ(bad, 0) << what;
}

void expect_same(const std::vector<float>& got, const std::vector<float>& want,
                 const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float))) << what;
}

// ---- vec16 loads and stores ----

TEST(F16Vec, LoadWidensEveryBitPatternExactly) {
    std::vector<f16> all(65536);
    for (uint32_t b = 0; b < 65536; ++b) all[b].bits = static_cast<uint16_t>(b);
    std::vector<float> out(65536 + 16, -1.0f);
    using namespace kernels::vec;
    for (int64_t i = 0; i < 65536; i += 16) store(out.data() + i, load(all.data() + i));
    for (uint32_t b = 0; b < 65536; ++b) {
        const float want = f16_to_f32(all[b]);
        if (std::isnan(want))
            ASSERT_TRUE(std::isnan(out[b])) << b;
        else
            ASSERT_EQ(std::memcmp(&out[b], &want, 4), 0) << "bits " << b;
    }
    // A partial load reads n lanes and fills the rest.
    V16 v = load_part(all.data() + 0x3c00, 5, -7.0f);  // 0x3c00 is 1.0
    store(out.data(), v);
    EXPECT_EQ(out[0], 1.0f);
    EXPECT_EQ(out[4], f16_to_f32(f16{0x3c04}));
    EXPECT_EQ(out[5], -7.0f);
    EXPECT_EQ(out[15], -7.0f);
}

TEST(F16Vec, StoreRoundsToNearestEvenLikeTheScalarConversion) {
    std::vector<float> x = {0.0f, -0.0f, 1.0f, 65504.0f, 65519.99f, 65520.0f, -65520.0f, 1e30f,
                            INFINITY, -INFINITY, 6e-8f, 2.9e-8f, 3.0e-8f, 5.96e-8f, 1e-10f,
                            1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, 6.1035e-5f, 6.1e-5f};
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> e(-30.0f, 17.0f);
    for (int i = 0; i < 20000; ++i)  // magnitudes from f16 underflow to overflow, both signs
        x.push_back((i % 2 ? -1.0f : 1.0f) * std::exp2(e(rng)));
    const int64_t n = static_cast<int64_t>(x.size());
    std::vector<f16> got(n);
    using namespace kernels::vec;
    for_each_vec(n, [&](int64_t j, int64_t m) {
        store_part(got.data() + j, load_part(x.data() + j, m), m);
    });
    for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(got[i].bits, f32_to_f16(x[i]).bits) << "x = " << x[i];
    f16 nan;
    store_part(&nan, splat(std::nanf("")), 1);
    EXPECT_TRUE(std::isnan(f16_to_f32(nan)));
    // A partial store writes n lanes only.
    std::vector<f16> guard(16, f16{0x1234});
    store_part(guard.data(), splat(2.0f), 3);
    EXPECT_EQ(guard[2].bits, 0x4000);
    EXPECT_EQ(guard[3].bits, 0x1234);
}

// ---- GEMM ----

struct GemmCase {
    int64_t m, n, k;
    bool ta, tb;
    float alpha, beta;
};

// C = alpha op(A) op(B) + beta C with f16 A, B (stored with padded leading dimensions) and C in
// c_dtype, against a double reference on the same values. Tolerance: the f32 accumulation
// (relative 1e-6 of sum |a b| per element, K up to 2e4: seen 2e-7) plus, for f16 C, its rounding
// (half an ulp, 2^-11 relative).
void check_f16_gemm(const GemmCase& g, DType c_dtype, GemmLibrary lib) {
    const int64_t ar = g.ta ? g.k : g.m, ac = g.ta ? g.m : g.k;  // stored shapes
    const int64_t br = g.tb ? g.n : g.k, bc = g.tb ? g.k : g.n;
    const int64_t lda = ac + 3, ldb = bc + 5, ldc = g.n + 2;
    const auto a = random_f16(ar * lda, 1, -1.0f, 1.0f), b = random_f16(br * ldb, 2, -1.0f, 1.0f);
    const auto c0 = random_f16(g.m * ldc, 3, -1.0f, 1.0f);
    const auto af = widen(a), bf = widen(b), cf = widen(c0);
    std::vector<f16> c16 = c0;
    std::vector<float> c32 = cf;
    void* c = c_dtype == DType::kF16 ? static_cast<void*>(c16.data()) : c32.data();
    gemm_with(lib, g.m, g.n, g.k, g.alpha, {a.data(), lda, g.ta}, {b.data(), ldb, g.tb},
              DType::kF16, g.beta, c, ldc, c_dtype);
    int bad = 0;
    for (int64_t i = 0; i < g.m; ++i)
        for (int64_t j = 0; j < g.n; ++j) {
            double acc = 0, mag = 0;
            for (int64_t p = 0; p < g.k; ++p) {
                const double x = g.ta ? af[p * lda + i] : af[i * lda + p];
                const double y = g.tb ? bf[j * ldb + p] : bf[p * ldb + j];
                acc += x * y;
                mag += std::fabs(x * y);
            }
            const double want = g.alpha * acc + g.beta * cf[i * ldc + j];
            const double got = c_dtype == DType::kF16 ? f16_to_f32(c16[i * ldc + j])
                                                      : c32[i * ldc + j];
            double tol = 1e-6 * (std::fabs(g.alpha) * mag + std::fabs(g.beta)) + 1e-7;
            if (c_dtype == DType::kF16) tol += std::ldexp(std::fabs(want), -11) + 6e-8;
            if (!(std::fabs(got - want) <= tol) && bad++ < 5)
                ADD_FAILURE() << "C(" << i << ", " << j << "): got " << got << ", want " << want;
        }
    EXPECT_EQ(bad, 0);
    // Padding columns of C are never written.
    for (int64_t i = 0; i < g.m; ++i)
        for (int64_t j = g.n; j < ldc; ++j) {
            if (c_dtype == DType::kF16)
                ASSERT_EQ(c16[i * ldc + j].bits, c0[i * ldc + j].bits);
            else
                ASSERT_EQ(c32[i * ldc + j], cf[i * ldc + j]);
        }
}

TEST(F16Gemm, MatchesReferenceForEveryLayout) {
    // (7, 19, 37): one tile; (600, 540, 33): 2 x 2 tiles of C; (40, 20, 80000): 16-row panels
    // (the panel budget over K), so 3 row tiles.
    const GemmCase shapes[] = {{7, 19, 37, false, false, 1, 0},
                               {600, 540, 33, false, false, 1, 0},
                               {40, 20, 80000, false, false, 1, 0}};
    // OpenBLAS unless OPENBLAS_CORETYPE names kernels this CPU cannot run (Note [Foreign core
    // type] in gemm.cpp): then the same cases run through oneDNN's f32 product.
    const GemmLibrary lib = gemm_supported(GemmLibrary::kOpenBlas, DType::kF16)
                                ? GemmLibrary::kOpenBlas
                                : GemmLibrary::kOneDnn;
    for (GemmCase g : shapes)
        for (int t = 0; t < 4; ++t)
            for (float beta : {0.0f, 1.0f})
                for (DType cd : {DType::kF16, DType::kF32}) {
                    g.ta = t & 1, g.tb = t & 2, g.beta = beta, g.alpha = beta ? 0.5f : 1.0f;
                    SCOPED_TRACE(std::to_string(g.m) + "x" + std::to_string(g.n) + "x" +
                                 std::to_string(g.k) + " ta " + std::to_string(g.ta) + " tb " +
                                 std::to_string(g.tb) + " beta " + std::to_string(beta) + " C " +
                                 dtype_name(cd));
                    check_f16_gemm(g, cd, lib);
                }
}

// The loop above runs OpenBLAS where it can; this runs oneDNN.
TEST(F16Gemm, RunsThroughOneDnnF32Too) {
    check_f16_gemm({33, 17, 45, true, false, 1, 1}, DType::kF16, GemmLibrary::kOneDnn);
    check_f16_gemm({33, 17, 45, false, true, 1, 0}, DType::kF32, GemmLibrary::kOneDnn);
}

TEST(F16Gemm, OverflowGoesToInfinityAndEmptyKScalesC) {
    std::vector<f16> a(4, f32_to_f16(300.0f)), b(4, f32_to_f16(300.0f)), c(1);
    gemm(1, 1, 4, 1.0f, {a.data(), 4, false}, {b.data(), 1, false}, DType::kF16, 0.0f, c.data(),
         1, DType::kF16);
    EXPECT_TRUE(std::isinf(f16_to_f32(c[0])));  // 4 * 300^2 = 360000 > 65504
    std::vector<f16> c2 = {f32_to_f16(3.0f), f32_to_f16(5.0f)};
    gemm(1, 2, 0, 1.0f, {a.data(), 1, false}, {b.data(), 2, false}, DType::kF16, 0.5f, c2.data(),
         2, DType::kF16);
    EXPECT_EQ(f16_to_f32(c2[0]), 1.5f);
    EXPECT_EQ(f16_to_f32(c2[1]), 2.5f);
}

// ---- kernels: the f16 instantiation against the f32 one ----

constexpr int64_t kN = 7, kC = 37;

TEST(F16Kernels, LayerNorm) {
    const auto x = random_f16(kN * kC, 1, -2.0f, 3.0f), g = random_f16(kC, 2, 0.5f, 1.5f),
               b = random_f16(kC, 3, -0.5f, 0.5f), dy = random_f16(kN * kC, 4, -1.0f, 1.0f);
    const auto xf = widen(x), gf = widen(g), bf = widen(b), dyf = widen(dy);
    std::vector<f16> y(kN * kC), dx(kN * kC);
    std::vector<float> yf(kN * kC), dxf(kN * kC), mean(kN), rstd(kN), meanf(kN), rstdf(kN);
    std::vector<float> dg(kC, 0.25f), db(kC, 0.25f), dgf = dg, dbf = db;
    kernels::layernorm_forward(x.data(), g.data(), b.data(), y.data(), mean.data(), rstd.data(),
                               kN, kC, 1e-5f);
    kernels::layernorm_forward(xf.data(), gf.data(), bf.data(), yf.data(), meanf.data(),
                               rstdf.data(), kN, kC, 1e-5f);
    expect_rounded(y, yf, "y");
    expect_same(mean, meanf, "mean");
    expect_same(rstd, rstdf, "rstd");
    kernels::layernorm_backward(dy.data(), x.data(), g.data(), mean.data(), rstd.data(), dx.data(),
                                dg.data(), db.data(), kN, kC);
    kernels::layernorm_backward(dyf.data(), xf.data(), gf.data(), meanf.data(), rstdf.data(),
                                dxf.data(), dgf.data(), dbf.data(), kN, kC);
    expect_rounded(dx, dxf, "dx");
    expect_same(dg, dgf, "dgamma");
    expect_same(db, dbf, "dbeta");
}

TEST(F16Kernels, Gelu) {
    const int64_t n = kN * kC;
    auto x = random_f16(n, 5, -6.0f, 6.0f);
    x[0] = f32_to_f16(-100.0f), x[1] = f32_to_f16(100.0f);  // saturated tails
    const auto dy = random_f16(n, 6, -1.0f, 1.0f);
    const auto xf = widen(x), dyf = widen(dy);
    std::vector<f16> y(n), dx(n);
    std::vector<float> yf(n), dxf(n);
    kernels::gelu_forward(x.data(), y.data(), n);
    kernels::gelu_forward(xf.data(), yf.data(), n);
    expect_rounded(y, yf, "y");
    kernels::gelu_backward(x.data(), dy.data(), dx.data(), n);
    kernels::gelu_backward(xf.data(), dyf.data(), dxf.data(), n);
    expect_rounded(dx, dxf, "dx");
}

TEST(F16Kernels, Bias) {
    auto y = random_f16(kN * kC, 7, -2.0f, 2.0f);
    const auto b = random_f16(kC, 8, -1.0f, 1.0f), dy = random_f16(kN * kC, 9, -1.0f, 1.0f);
    auto yf = widen(y);
    const auto bf = widen(b), dyf = widen(dy);
    kernels::bias_add(y.data(), b.data(), kN, kC);
    kernels::bias_add(yf.data(), bf.data(), kN, kC);
    expect_rounded(y, yf, "y");
    std::vector<float> db(kC, 0.5f), dbf = db;
    kernels::bias_backward(dy.data(), db.data(), kN, kC);
    kernels::bias_backward(dyf.data(), dbf.data(), kN, kC);
    expect_same(db, dbf, "db");
}

TEST(F16Kernels, Softmax) {
    const auto x = random_f16(kN * kC, 10, -8.0f, 8.0f), dy = random_f16(kN * kC, 11, -1.0f, 1.0f);
    const auto xf = widen(x), dyf = widen(dy);
    std::vector<f16> y(kN * kC), dx(kN * kC);
    std::vector<float> yf(kN * kC), dxf(kN * kC);
    kernels::softmax_forward(x.data(), y.data(), kN, kC);
    kernels::softmax_forward(xf.data(), yf.data(), kN, kC);
    expect_rounded(y, yf, "y");
    const auto y16 = widen(y);  // backward reads the stored y: give both the same values
    kernels::softmax_backward(y.data(), dy.data(), dx.data(), kN, kC);
    kernels::softmax_backward(y16.data(), dyf.data(), dxf.data(), kN, kC);
    expect_rounded(dx, dxf, "dx");
}

TEST(F16Kernels, CrossEntropy) {
    const int64_t V = 300;  // a full 256-logit block and a partial one
    const auto x = random_f16(kN * V, 12, -6.0f, 6.0f);
    const auto xf = widen(x);
    std::vector<int32_t> targets = {0, 299, 5, -1, 17, 256, 100};
    std::vector<float> loss(kN), lse(kN), lossf(kN), lsef(kN), dloss(kN);
    for (int64_t i = 0; i < kN; ++i) dloss[i] = 32.0f + static_cast<float>(i);  // a loss scale
    kernels::cross_entropy_forward(x.data(), targets.data(), loss.data(), lse.data(), kN, V);
    kernels::cross_entropy_forward(xf.data(), targets.data(), lossf.data(), lsef.data(), kN, V);
    expect_same(loss, lossf, "losses");
    expect_same(lse, lsef, "lse");
    std::vector<f16> d(kN * V);
    std::vector<float> df(kN * V);
    kernels::cross_entropy_backward(x.data(), targets.data(), lse.data(), dloss.data(), d.data(),
                                    kN, V);
    kernels::cross_entropy_backward(xf.data(), targets.data(), lsef.data(), dloss.data(),
                                    df.data(), kN, V);
    expect_rounded(d, df, "dlogits");
}

TEST(F16Kernels, Embedding) {
    const int64_t V = 11, N = 3 * kN;
    std::vector<int32_t> ids(N);
    for (int64_t i = 0; i < N; ++i) ids[i] = static_cast<int32_t>((i * 5) % V);  // repeats
    const auto table = random_f16(V * kC, 13, -1.0f, 1.0f), dout = random_f16(N * kC, 14, -1, 1);
    const auto tf = widen(table), doutf = widen(dout);
    std::vector<f16> out(N * kC);
    std::vector<float> outf(N * kC);
    kernels::embedding_forward(ids.data(), table.data(), out.data(), N, V, kC);
    kernels::embedding_forward(ids.data(), tf.data(), outf.data(), N, V, kC);
    expect_rounded(out, outf, "out");
    std::vector<float> dt(V * kC, 0.5f), dtf = dt;
    kernels::embedding_backward(ids.data(), dout.data(), dt.data(), N, V, kC);
    kernels::embedding_backward(ids.data(), doutf.data(), dtf.data(), N, V, kC);
    expect_same(dt, dtf, "dtable");
}

TEST(F16Kernels, Attention) {
    const kernels::AttentionShape s{2, 70, 40, 2};  // T across the 64-row tile, D = 20
    const int64_t nqkv = s.B * s.T * 3 * s.C, nout = s.B * s.T * s.C;
    const auto qkv = random_f16(nqkv, 15, -1.5f, 1.5f), dout = random_f16(nout, 16, -1.0f, 1.0f);
    const auto qkvf = widen(qkv), doutf = widen(dout);
    std::vector<char> ws(kernels::attention_workspace_bytes(s, num_threads()));
    std::vector<f16> out(nout), dqkv(nqkv);
    std::vector<float> outf(nout), dqkvf(nqkv), lse(s.B * s.H * s.T), lsef(lse.size());
    kernels::attention_forward(qkv.data(), out.data(), lse.data(), s, ws.data());
    kernels::attention_forward(qkvf.data(), outf.data(), lsef.data(), s, ws.data());
    expect_rounded(out, outf, "out");
    expect_same(lse, lsef, "lse");
    const auto out16 = widen(out);  // backward reads the stored out
    kernels::attention_backward(qkv.data(), out.data(), dout.data(), lse.data(), dqkv.data(), s,
                                ws.data());
    kernels::attention_backward(qkvf.data(), out16.data(), doutf.data(), lsef.data(),
                                dqkvf.data(), s, ws.data());
    expect_rounded(dqkv, dqkvf, "dqkv");
}

// ---- elementwise ----

TEST(F16Elementwise, AddScaleAndFiniteCheck) {
    MemoryPool pool;
    const int64_t n = 1003;
    auto make = [&](uint32_t seed) {
        Tensor t = Tensor::empty(pool, {n}, DType::kF16, MemCategory::kActivations);
        auto v = random_f16(n, seed, -100.0f, 100.0f);
        std::memcpy(t.raw(), v.data(), n * sizeof(f16));
        return t;
    };
    Tensor a = make(1), b = make(2), y = make(3);
    const auto av = a.to_vector(), bv = b.to_vector();
    kernels::add(a, b, y);
    for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(y.data<f16>()[i].bits, f32_to_f16(av[i] + bv[i]).bits) << i;
    Tensor g = Tensor::empty(pool, {n}, DType::kF32, MemCategory::kGrads);
    g.fill(0.5f);
    kernels::add_inplace(g, a);  // f32 += f16
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(g.data<float>()[i], 0.5f + av[i]) << i;
    kernels::add_inplace(a, b);  // f16 += f16
    for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(a.data<f16>()[i].bits, f32_to_f16(av[i] + bv[i]).bits) << i;
    kernels::scale_inplace(b, 1000.0f);  // most of |b| * 1000 > 65504: infinities
    for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(b.data<f16>()[i].bits, f32_to_f16(bv[i] * 1000.0f).bits) << i;
    EXPECT_FALSE(kernels::all_finite(b));

    Tensor f = make(4);
    EXPECT_TRUE(kernels::all_finite(f));
    f.data<f16>()[n - 1] = f32_to_f16(65504.0f);  // the largest finite f16
    EXPECT_TRUE(kernels::all_finite(f));
    for (int64_t pos : {int64_t{0}, int64_t{517}, n - 1}) {  // full vectors and the partial tail
        for (float bad : {INFINITY, -INFINITY, std::nanf("")}) {
            Tensor h = make(4);
            h.data<f16>()[pos] = f32_to_f16(bad);
            EXPECT_FALSE(kernels::all_finite(h)) << pos << " " << bad;
        }
    }
}

}  // namespace
}  // namespace zt
