#include "tensor/gemm.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "util/error.h"
#include "util/random.h"

namespace zt {

namespace {

// Naive C = alpha op(A) op(B) + beta C in double, row-major.
std::vector<double> reference(int64_t m, int64_t n, int64_t k, float alpha,
                              const std::vector<float>& a, bool ta, const std::vector<float>& b,
                              bool tb, float beta, const std::vector<float>& c) {
    std::vector<double> out(m * n);
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
            double s = 0;
            for (int64_t p = 0; p < k; ++p) {
                double av = ta ? a[p * m + i] : a[i * k + p];
                double bv = tb ? b[j * k + p] : b[p * n + j];
                s += av * bv;
            }
            out[i * n + j] = alpha * s + beta * c[i * n + j];
        }
    return out;
}

std::vector<float> random_vec(int64_t n, uint64_t stream, bool bf16_exact) {
    std::vector<float> v(n);
    for (int64_t i = 0; i < n; ++i) {
        float x = static_cast<float>(normal01(3, stream, i));
        v[i] = bf16_exact ? bf16_to_f32(f32_to_bf16(x)) : x;
    }
    return v;
}

struct Case {
    GemmLibrary lib;
    DType ab;
    DType c;
};

void check(const Case& cs, int64_t m, int64_t n, int64_t k, bool ta, bool tb, float alpha,
           float beta) {
    const bool bf = cs.ab == DType::kBF16;
    auto a = random_vec(m * k, 1, bf), b = random_vec(k * n, 2, bf);
    auto c = random_vec(m * n, 3, cs.c == DType::kBF16);
    auto want = reference(m, n, k, alpha, a, ta, b, tb, beta, c);
    std::vector<uint16_t> a16(a.size()), b16(b.size()), c16(c.size());
    for (size_t i = 0; i < a.size(); ++i) a16[i] = f32_to_bf16(a[i]).bits;
    for (size_t i = 0; i < b.size(); ++i) b16[i] = f32_to_bf16(b[i]).bits;
    for (size_t i = 0; i < c.size(); ++i) c16[i] = f32_to_bf16(c[i]).bits;
    const void* ap = bf ? static_cast<const void*>(a16.data()) : a.data();
    const void* bp = bf ? static_cast<const void*>(b16.data()) : b.data();
    void* cp = cs.c == DType::kBF16 ? static_cast<void*>(c16.data()) : c.data();
    gemm_with(cs.lib, m, n, k, alpha, {ap, ta ? m : k, ta}, {bp, tb ? k : n, tb}, cs.ab, beta, cp, n,
              cs.c);
    for (int64_t i = 0; i < m * n; ++i) {
        double got = cs.c == DType::kBF16 ? bf16_to_f32(bf16{c16[i]}) : c[i];
        // f32 accumulation over k terms of size ~1: error ~ k * 2^-24 * sqrt(k); bf16 output adds
        // a relative rounding of 2^-8.
        double tol = cs.c == DType::kBF16 ? 1e-2 * (std::fabs(want[i]) + 1) : 1e-4 * std::sqrt(k);
        ASSERT_NEAR(got, want[i], tol) << "i=" << i << " m,n,k=" << m << "," << n << "," << k
                                       << " ta=" << ta << " tb=" << tb;
    }
}

// Note [Unsupported GEMM]: a library this CPU cannot run (oneDNN's native bf16 product on an
// AVX2-only CPU) is refused with an error naming it, never run; the case is then checked as that.
bool refused_here(const Case& cs) {
    if (gemm_supported(cs.lib, cs.ab)) return false;
    std::vector<uint16_t> x(64, 0x3f80);  // bf16 1.0
    std::vector<float> c(64);
    try {
        gemm_with(cs.lib, 8, 8, 8, 1.0f, {x.data(), 8, false}, {x.data(), 8, false}, cs.ab, 0.0f,
                  c.data(), 8, DType::kF32);
        ADD_FAILURE() << gemm_library_name(cs.lib) << " " << dtype_name(cs.ab)
                      << " is unsupported but ran";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("cannot compute"), std::string::npos) << e.what();
    }
    return true;
}

}  // namespace

// oneDNN's f32 product runs everywhere, and so do the widened bf16 and f16 paths through it;
// OpenBLAS runs unless the user's OPENBLAS_CORETYPE names kernels this CPU lacks (Note [Foreign
// core type]), and then for no dtype. Only oneDNN's native bf16 product depends on the CPU alone.
TEST(Gemm, SupportFollowsTheCpuAndTheUsersCoreType) {
    for (DType d : {DType::kF32, DType::kF16, DType::kBF16})
        EXPECT_TRUE(gemm_supported(GemmLibrary::kOneDnnF32, d)) << dtype_name(d);
    EXPECT_TRUE(gemm_supported(GemmLibrary::kOneDnn, DType::kF32));
    EXPECT_TRUE(gemm_supported(GemmLibrary::kOneDnn, DType::kF16));
    const bool openblas = gemm_supported(GemmLibrary::kOpenBlas, DType::kF32);
    EXPECT_EQ(gemm_supported(GemmLibrary::kOpenBlas, DType::kBF16), openblas);
    EXPECT_EQ(gemm_supported(GemmLibrary::kOpenBlas, DType::kF16), openblas);
    if (openblas_user_coretype().empty()) {
        EXPECT_TRUE(openblas);
    }
    EXPECT_EQ(openblas_core_name().rfind("none (", 0) == 0, !openblas) << openblas_core_name();
}

TEST(Gemm, AllLibrariesTransposesAndOddSizes) {
    const Case cases[] = {{GemmLibrary::kOpenBlas, DType::kF32, DType::kF32},
                          {GemmLibrary::kOneDnn, DType::kF32, DType::kF32},
                          {GemmLibrary::kOneDnn, DType::kBF16, DType::kF32},
                          {GemmLibrary::kOneDnn, DType::kBF16, DType::kBF16},
                          // bf16 widened to f32 (Note [Widened GEMM]), for each f32 library
                          {GemmLibrary::kOneDnnF32, DType::kBF16, DType::kF32},
                          {GemmLibrary::kOneDnnF32, DType::kBF16, DType::kBF16},
                          {GemmLibrary::kOpenBlas, DType::kBF16, DType::kF32},
                          {GemmLibrary::kOpenBlas, DType::kBF16, DType::kBF16}};
    for (const Case& cs : cases) {
        if (refused_here(cs)) continue;
        for (bool ta : {false, true})
            for (bool tb : {false, true}) {
                check(cs, 7, 19, 37, ta, tb, 1.0f, 0.0f);
                check(cs, 33, 5, 17, ta, tb, 0.5f, 1.0f);  // accumulate into C
            }
    }
}

// The widened path cuts C into tiles of at most 512 x 512 and panels of about 2^20 floats: these
// shapes cross a tile edge in both directions, and a K so long that panels hold 16 rows.
TEST(Gemm, WidenedBf16AcrossTilesAndPanels) {
    for (GemmLibrary lib : {GemmLibrary::kOneDnnF32, GemmLibrary::kOpenBlas})
        for (DType cd : {DType::kF32, DType::kBF16}) {
            if (refused_here({lib, DType::kBF16, cd})) continue;
            check({lib, DType::kBF16, cd}, 530, 517, 9, false, true, 1.0f, 0.0f);
            check({lib, DType::kBF16, cd}, 517, 530, 9, true, false, 0.5f, 1.0f);
            check({lib, DType::kBF16, cd}, 40, 3, 70000, false, false, 1.0f, 1.0f);
        }
}

// Note [Primitives per thread count]: a shape run at one thread count and then another gets a
// primitive of its own for each (a cached one keeps the thread split it was made with), and the
// same result.
TEST(Gemm, OneDnnPrimitivesAreMadePerThreadCount) {
    const int saved = omp_get_max_threads();
    std::vector<float> a(37 * 29, 0.5f), b(29 * 41, 0.25f), c1(37 * 41), c2(37 * 41);
    const auto run = [&](std::vector<float>& c) {
        gemm_with(GemmLibrary::kOneDnnF32, 37, 41, 29, 1.0f, {a.data(), 29, false},
                  {b.data(), 41, false}, DType::kF32, 0.0f, c.data(), 41, DType::kF32);
    };
    omp_set_num_threads(1);
    run(c1);
    const int64_t made = onednn_primitives_made();
    run(c1);
    EXPECT_EQ(onednn_primitives_made(), made) << "the same count reuses its primitive";
    omp_set_num_threads(2);
    run(c2);
    EXPECT_EQ(onednn_primitives_made(), made + 1);
    omp_set_num_threads(saved);
    EXPECT_EQ(c1, c2);
}

TEST(Gemm, ZeroInnerDimensionScalesC) {
    std::vector<float> c = {1, 2, 3, 4};
    gemm(2, 2, 0, 1.0f, {nullptr, 1, false}, {nullptr, 2, false}, DType::kF32, 0.0f, c.data(), 2,
         DType::kF32);
    EXPECT_EQ(c, (std::vector<float>{0, 0, 0, 0}));
}

TEST(Gemm, OpenBlasKeepsTheUsersCoreType) {
    // Whatever the environment says (Haswell, SkylakeX or nothing), gemm.cpp never overwrites a
    // user's OPENBLAS_CORETYPE; it only asks for AVX-512 kernels when none was set.
    const std::string user = openblas_user_coretype();
    if (!user.empty()) {
        const char* now = std::getenv("OPENBLAS_CORETYPE");
        ASSERT_NE(now, nullptr);
        EXPECT_EQ(user, now);
    }
    EXPECT_FALSE(openblas_core_name().empty());
    EXPECT_NE(gemm_libraries_identity().find("onednn"), std::string::npos);
}

}  // namespace zt

namespace zt {

// gemm_bias against the double reference plus the bias row, every library and output type, odd
// sizes, every transpose, and K = 0 (C = the bias).
TEST(GemmBias, EveryLibraryAddsTheBiasRow) {
    const Case cases[] = {{GemmLibrary::kOpenBlas, DType::kF32, DType::kF32},
                          {GemmLibrary::kOneDnn, DType::kF32, DType::kF32},
                          {GemmLibrary::kOneDnn, DType::kBF16, DType::kF32},
                          {GemmLibrary::kOneDnn, DType::kBF16, DType::kBF16},
                          {GemmLibrary::kOneDnnF32, DType::kBF16, DType::kBF16},
                          {GemmLibrary::kOpenBlas, DType::kBF16, DType::kBF16},
                          {GemmLibrary::kOpenBlas, DType::kBF16, DType::kF32}};
    struct Dims {
        int64_t m, n, k;
    };
    for (const Case& cs : cases) {
        if (refused_here(cs)) continue;
        for (Dims d : {Dims{7, 19, 37}, Dims{530, 517, 9}, Dims{5, 3, 0}})
            for (int t = 0; t < 4; ++t) {
                const bool ta = t & 1, tb = t & 2, bf = cs.ab == DType::kBF16;
                const int64_t m = d.m, n = d.n, k = d.k;
                auto a = random_vec(m * k, 1, bf), b = random_vec(k * n, 2, bf);
                auto bias = random_vec(n, 4, bf);
                auto want = reference(m, n, k, 1.0f, a, ta, b, tb, 0.0f, std::vector<float>(m * n));
                std::vector<uint16_t> a16(a.size()), b16(b.size()), bias16(n), c16(m * n, 0x7fc0);
                for (size_t i = 0; i < a.size(); ++i) a16[i] = f32_to_bf16(a[i]).bits;
                for (size_t i = 0; i < b.size(); ++i) b16[i] = f32_to_bf16(b[i]).bits;
                for (int64_t j = 0; j < n; ++j) bias16[j] = f32_to_bf16(bias[j]).bits;
                std::vector<float> c(m * n, std::nanf(""));  // every element must be written
                gemm_bias_with(cs.lib, m, n, k, {bf ? (void*)a16.data() : a.data(), ta ? m : k, ta},
                               {bf ? (void*)b16.data() : b.data(), tb ? k : n, tb}, cs.ab,
                               bf ? (void*)bias16.data() : bias.data(),
                               cs.c == DType::kBF16 ? (void*)c16.data() : c.data(), n, cs.c);
                for (int64_t i = 0; i < m * n; ++i) {
                    const double w = want[i] + bias[i % n];
                    const double got = cs.c == DType::kBF16 ? bf16_to_f32(bf16{c16[i]}) : c[i];
                    const double tol = cs.c == DType::kBF16 ? 1e-2 * (std::fabs(w) + 1)
                                                            : 1e-4 * std::sqrt(k + 1.0);
                    ASSERT_NEAR(got, w, tol) << gemm_library_name(cs.lib) << " "
                                             << dtype_name(cs.ab) << "->" << dtype_name(cs.c)
                                             << " m,n,k=" << m << "," << n << "," << k
                                             << " ta=" << ta << " tb=" << tb << " i=" << i;
                }
            }
    }
}

}  // namespace zt
