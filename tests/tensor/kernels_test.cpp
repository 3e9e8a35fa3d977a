// Row kernels of tensor/kernels/ (layernorm, gelu, bias, softmax, cross_entropy, embedding) in f32
// and bf16: forward against a naive double reference, backward against central differences of
// L = sum(w * y) through that reference, both on the values the kernel actually sees
// (bf16-rounded). Sizes are odd and not multiples of 16 lanes or of the thread count; row
// reductions must give the same bits at 1 and 2 threads.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "tensor/dtype.h"
#include "tensor/kernels/bias.h"
#include "tensor/kernels/cross_entropy.h"
#include "tensor/kernels/embedding.h"
#include "tensor/kernels/gelu.h"
#include "tensor/kernels/layernorm.h"
#include "tensor/kernels/softmax.h"
#include "tensor/threads.h"
#include "util/error.h"

namespace zt::kernels {
namespace {

using Vec = std::vector<double>;

// Tolerance |got - want| <= atol + rtol |want|.
struct Tol {
    double rtol, atol;
};

// What a kernel of storage type T is held to. f32: rounding of O(1) values over rows of at most a
// few hundred elements (errors seen: 6e-7 absolute, 6e-6 relative). bf16: every stored output is
// rounded to 8 significant bits, a relative error up to 2^-8 = 3.9e-3 (seen 3.89e-3), plus f32 math
// far below.
template <typename T>
struct Tols;
template <>
struct Tols<float> {
    static constexpr Tol fwd{1e-5, 1e-6}, bwd{1e-5, 1e-6};
};
template <>
struct Tols<bf16> {
    static constexpr Tol fwd{5e-3, 1e-5}, bwd{5e-3, 1e-5};
};
constexpr Tol kF32Tol{1e-5, 1e-6};  // f32 outputs (mean, rstd, dgamma, losses), any storage type

template <typename T>
std::vector<T> random_values(size_t n, uint32_t seed, float lo, float hi) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(lo, hi);
    std::vector<T> v(n);
    for (T& e : v) e = from_f32<T>(u(rng));
    return v;
}

template <typename T>
Vec widen(const std::vector<T>& v) {
    Vec d(v.size());
    for (size_t i = 0; i < v.size(); ++i) d[i] = to_f32(v[i]);
    return d;
}

double dot(const Vec& a, const Vec& b) {
    double s = 0;
    for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
    return s;
}

Vec add(Vec a, const Vec& b) {
    for (size_t i = 0; i < a.size(); ++i) a[i] += b[i];
    return a;
}

// Central differences of f at p, one element at a time, in double.
Vec numeric_grad(const std::function<double(const Vec&)>& f, Vec p, double h = 1e-6) {
    Vec g(p.size());
    for (size_t i = 0; i < p.size(); ++i) {
        const double keep = p[i];
        p[i] = keep + h;
        const double up = f(p);
        p[i] = keep - h;
        const double down = f(p);
        p[i] = keep;
        g[i] = (up - down) / (2 * h);
    }
    return g;
}

void expect_close(const Vec& got, const Vec& want, Tol tol, const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    int bad = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        const double err = std::fabs(got[i] - want[i]);
        if (!(err <= tol.atol + tol.rtol * std::fabs(want[i])) && bad++ < 5)
            ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want " << want[i];
    }
    EXPECT_EQ(bad, 0) << what << ": elements out of tolerance";
}

// ---- naive references in double ----

Vec layernorm_ref(const Vec& x, const Vec& g, const Vec& b, int64_t N, int64_t C, double eps,
                  Vec* mean = nullptr, Vec* rstd = nullptr) {
    Vec y(x.size());
    for (int64_t i = 0; i < N; ++i) {
        double m = 0, v = 0;
        for (int64_t j = 0; j < C; ++j) m += x[i * C + j] / C;
        for (int64_t j = 0; j < C; ++j) v += (x[i * C + j] - m) * (x[i * C + j] - m) / C;
        const double r = 1 / std::sqrt(v + eps);
        for (int64_t j = 0; j < C; ++j) y[i * C + j] = (x[i * C + j] - m) * r * g[j] + b[j];
        if (mean) mean->push_back(m);
        if (rstd) rstd->push_back(r);
    }
    return y;
}

Vec gelu_ref(const Vec& x) {
    Vec y(x.size());
    for (size_t i = 0; i < x.size(); ++i)
        y[i] = 0.5 * x[i] *
               (1 + std::tanh(std::sqrt(2 / M_PI) * (x[i] + 0.044715 * x[i] * x[i] * x[i])));
    return y;
}

Vec softmax_ref(const Vec& x, int64_t N, int64_t C) {
    Vec y(x.size());
    for (int64_t i = 0; i < N; ++i) {
        double m = x[i * C], s = 0;
        for (int64_t j = 0; j < C; ++j) m = std::max(m, x[i * C + j]);
        for (int64_t j = 0; j < C; ++j) s += std::exp(x[i * C + j] - m);
        for (int64_t j = 0; j < C; ++j) y[i * C + j] = std::exp(x[i * C + j] - m) / s;
    }
    return y;
}

// Per-row log-sum-exp; losses = lse - x[target], 0 where target < 0.
Vec cross_entropy_ref(const Vec& x, const std::vector<int32_t>& t, int64_t N, int64_t V,
                      Vec* lse = nullptr) {
    Vec loss(N);
    for (int64_t i = 0; i < N; ++i) {
        double m = x[i * V], s = 0;
        for (int64_t j = 0; j < V; ++j) m = std::max(m, x[i * V + j]);
        for (int64_t j = 0; j < V; ++j) s += std::exp(x[i * V + j] - m);
        const double l = m + std::log(s);
        if (lse) lse->push_back(l);
        loss[i] = t[i] < 0 ? 0.0 : l - x[i * V + t[i]];
    }
    return loss;
}

Vec embedding_ref(const std::vector<int32_t>& ids, const Vec& table, int64_t C) {
    Vec out;
    for (int32_t id : ids)
        out.insert(out.end(), table.begin() + id * C, table.begin() + id * C + C);
    return out;
}

struct Shape {
    int64_t N, C;
};
// Odd sizes: partial vectors (19, 37), several vectors plus a tail and two 64-column blocks (70).
constexpr Shape kShapes[] = {{7, 37}, {5, 19}, {3, 70}};

std::string shape_name(Shape s) { return "N=" + std::to_string(s.N) + " C=" + std::to_string(s.C); }

template <typename T>
class KernelTest : public ::testing::Test {};
using StorageTypes = ::testing::Types<float, bf16>;
TYPED_TEST_SUITE(KernelTest, StorageTypes);

template <typename T>
T nan_value() {  // prefill for outputs that must be written (=), so a skipped element shows
    return from_f32<T>(std::nanf(""));
}

TYPED_TEST(KernelTest, LayerNormForwardAndBackward) {
    using T = TypeParam;
    const float eps = 1e-5f;
    for (Shape s : kShapes) {
        SCOPED_TRACE(shape_name(s));
        const int64_t N = s.N, C = s.C;
        auto x = random_values<T>(N * C, 1, -2.0f, 3.0f);
        auto gamma = random_values<T>(C, 2, 0.5f, 1.5f);
        auto beta = random_values<T>(C, 3, -0.5f, 0.5f);
        std::vector<T> y(N * C, nan_value<T>());
        std::vector<float> mean(N), rstd(N);
        layernorm_forward(x.data(), gamma.data(), beta.data(), y.data(), mean.data(), rstd.data(),
                          N, C, eps);
        const Vec xd = widen(x), gd = widen(gamma), bd = widen(beta);
        Vec mean_want, rstd_want;
        expect_close(widen(y), layernorm_ref(xd, gd, bd, N, C, eps, &mean_want, &rstd_want),
                     Tols<T>::fwd, "y");
        expect_close(widen(mean), mean_want, kF32Tol, "mean");
        expect_close(widen(rstd), rstd_want, kF32Tol, "rstd");

        auto dy = random_values<T>(N * C, 4, -1.0f, 1.0f);
        const Vec w = widen(dy);
        auto loss = [&](const Vec& xv, const Vec& gv, const Vec& bv) {
            return dot(w, layernorm_ref(xv, gv, bv, N, C, eps));
        };
        std::vector<T> dx(N * C, nan_value<T>());
        auto dgamma = random_values<float>(C, 5, -1.0f, 1.0f);  // accumulated (+=) onto this
        auto dbeta = random_values<float>(C, 6, -1.0f, 1.0f);
        const Vec dgamma0 = widen(dgamma), dbeta0 = widen(dbeta);
        layernorm_backward(dy.data(), x.data(), gamma.data(), mean.data(), rstd.data(), dx.data(),
                           dgamma.data(), dbeta.data(), N, C);
        expect_close(widen(dx), numeric_grad([&](const Vec& p) { return loss(p, gd, bd); }, xd),
                     Tols<T>::bwd, "dx");
        expect_close(widen(dgamma),
                     add(dgamma0, numeric_grad([&](const Vec& p) { return loss(xd, p, bd); }, gd)),
                     kF32Tol, "dgamma");
        expect_close(widen(dbeta),
                     add(dbeta0, numeric_grad([&](const Vec& p) { return loss(xd, gd, p); }, bd)),
                     kF32Tol, "dbeta");
    }
}

TYPED_TEST(KernelTest, GeluForwardAndBackward) {
    using T = TypeParam;
    const int64_t n = 7 * 37;
    auto x = random_values<T>(n, 7, -5.0f, 5.0f);
    const float tails[] = {-100.0f, -12.0f, -3.0f, 0.0f, 3.0f, 12.0f, 100.0f};  // saturated sigmoid
    for (size_t i = 0; i < std::size(tails); ++i) x[i] = from_f32<T>(tails[i]);
    std::vector<T> y(n, nan_value<T>());
    gelu_forward(x.data(), y.data(), n);
    const Vec xd = widen(x);
    expect_close(widen(y), gelu_ref(xd), Tols<T>::fwd, "y");

    auto dy = random_values<T>(n, 8, -1.0f, 1.0f);
    const Vec w = widen(dy);
    std::vector<T> dx(n, nan_value<T>());
    gelu_backward(x.data(), dy.data(), dx.data(), n);
    expect_close(widen(dx), numeric_grad([&](const Vec& p) { return dot(w, gelu_ref(p)); }, xd),
                 Tols<T>::bwd, "dx");
}

TYPED_TEST(KernelTest, BiasAddAndBackward) {
    using T = TypeParam;
    for (Shape s : kShapes) {
        SCOPED_TRACE(shape_name(s));
        const int64_t N = s.N, C = s.C;
        auto y = random_values<T>(N * C, 9, -2.0f, 2.0f);
        auto b = random_values<T>(C, 10, -1.0f, 1.0f);
        const Vec y0 = widen(y), bd = widen(b);
        auto ref = [&](const Vec& bv) {
            Vec r = y0;
            for (int64_t i = 0; i < N * C; ++i) r[i] += bv[i % C];
            return r;
        };
        bias_add(y.data(), b.data(), N, C);
        expect_close(widen(y), ref(bd), Tols<T>::fwd, "y");

        auto dy = random_values<T>(N * C, 11, -1.0f, 1.0f);
        const Vec w = widen(dy);
        auto db = random_values<float>(C, 12, -1.0f, 1.0f);  // accumulated (+=) onto this
        const Vec db0 = widen(db);
        bias_backward(dy.data(), db.data(), N, C);
        expect_close(widen(db),
                     add(db0, numeric_grad([&](const Vec& p) { return dot(w, ref(p)); }, bd)),
                     kF32Tol, "db");
    }
}

TYPED_TEST(KernelTest, SoftmaxForwardAndBackward) {
    using T = TypeParam;
    for (Shape s : kShapes) {
        SCOPED_TRACE(shape_name(s));
        const int64_t N = s.N, C = s.C;
        auto x = random_values<T>(N * C, 13, -4.0f, 4.0f);
        for (int64_t j = 0; j < C; ++j)  // a row far from 0: the max must be subtracted
            x[j] = from_f32<T>(to_f32(x[j]) + 80.0f);
        std::vector<T> y(N * C, nan_value<T>());
        softmax_forward(x.data(), y.data(), N, C);
        const Vec xd = widen(x);
        expect_close(widen(y), softmax_ref(xd, N, C), Tols<T>::fwd, "y");

        auto dy = random_values<T>(N * C, 14, -1.0f, 1.0f);
        const Vec w = widen(dy);
        std::vector<T> dx(N * C, nan_value<T>());
        softmax_backward(y.data(), dy.data(), dx.data(), N, C);
        // bf16: y is itself a rounded output, so dx = y (dy - sum(y dy)) carries up to 2^-8 |y|
        // |dy - sum(y dy)| <= 2^-7 |y| of absolute error besides its own rounding (seen 6.4e-4).
        const Tol tol = std::is_same_v<T, bf16> ? Tol{5e-3, 2e-3} : Tols<T>::bwd;
        expect_close(widen(dx),
                     numeric_grad([&](const Vec& p) { return dot(w, softmax_ref(p, N, C)); }, xd),
                     tol, "dx");
    }
}

// logits: (N, V) with the given scale, plus `trend` * column so the row max moves from block to
// block of the kernel's one-pass log-sum-exp, and row 0 shifted by 100 (exp would overflow f32).
template <typename T>
void check_cross_entropy(int64_t N, int64_t V, float scale, float trend) {
    auto x = random_values<T>(N * V, 15, -scale, scale);
    for (int64_t i = 0; i < N * V; ++i) x[i] = from_f32<T>(to_f32(x[i]) + trend * (i % V));
    for (int64_t j = 0; j < V; ++j) x[j] = from_f32<T>(to_f32(x[j]) + 100.0f);
    std::vector<int32_t> targets(N);
    std::mt19937 rng(16);
    for (int32_t& t : targets) t = static_cast<int32_t>(rng() % V);
    targets[N - 1] = -1;  // ignored row
    std::vector<float> losses(N, NAN), lse(N, NAN);
    cross_entropy_forward(x.data(), targets.data(), losses.data(), lse.data(), N, V);
    const Vec xd = widen(x);
    Vec lse_want;
    expect_close(widen(losses), cross_entropy_ref(xd, targets, N, V, &lse_want), kF32Tol, "losses");
    expect_close(widen(lse), lse_want, kF32Tol, "lse");

    auto dloss = random_values<float>(N, 17, 0.5f, 2.0f);
    const Vec dl = widen(dloss);
    std::vector<T> dlogits(N * V, nan_value<T>());
    cross_entropy_backward(x.data(), targets.data(), lse.data(), dloss.data(), dlogits.data(), N,
                           V);
    // f32: row 0's lse near 100 is stored to half an ulp of 100 (3.8e-6), an error that
    // exp(x - lse) carries over as relative error (seen 7.3e-6).
    const Tol tol = std::is_same_v<T, float> ? Tol{2e-5, 1e-6} : Tols<T>::bwd;
    expect_close(
        widen(dlogits),
        numeric_grad([&](const Vec& p) { return dot(dl, cross_entropy_ref(p, targets, N, V)); },
                     xd),
        tol, "dlogits");
}

TYPED_TEST(KernelTest, CrossEntropyForwardAndBackward) {
    for (Shape s : kShapes) {
        SCOPED_TRACE(shape_name(s));
        check_cross_entropy<TypeParam>(s.N, s.C, 4.0f, 0.0f);
    }
    SCOPED_TRACE("V=1000");  // 3 full blocks of 256 and a partial one
    check_cross_entropy<TypeParam>(3, 1000, 4.0f, 0.01f);
}

TYPED_TEST(KernelTest, CrossEntropyRejectsTargetsPastTheVocabulary) {
    using T = TypeParam;
    std::vector<T> x(3 * 37, from_f32<T>(0.0f)), d(3 * 37);
    std::vector<int32_t> targets = {0, 37, 5};
    std::vector<float> losses(3), lse(3), dloss(3, 1.0f);
    try {
        cross_entropy_forward(x.data(), targets.data(), losses.data(), lse.data(), 3, 37);
        FAIL() << "expected an error";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::kInput);
        EXPECT_NE(e.message().find("target 37"), std::string::npos) << e.message();
        EXPECT_NE(e.message().find("size 37"), std::string::npos) << e.message();
    }
    EXPECT_THROW(
        cross_entropy_backward(x.data(), targets.data(), lse.data(), dloss.data(), d.data(), 3, 37),
        Error);
}

TYPED_TEST(KernelTest, EmbeddingForwardAndBackward) {
    using T = TypeParam;
    for (Shape s : kShapes) {
        SCOPED_TRACE(shape_name(s));
        const int64_t V = 11, N = s.N * 3, C = s.C;  // more ids than rows: repeats
        std::vector<int32_t> ids(N);
        std::mt19937 rng(18);
        for (int32_t& id : ids) id = static_cast<int32_t>(rng() % V);
        ids[0] = 0;
        ids[1] = static_cast<int32_t>(V - 1);
        auto table = random_values<T>(V * C, 19, -1.0f, 1.0f);
        std::vector<T> out(N * C, nan_value<T>());
        embedding_forward(ids.data(), table.data(), out.data(), N, V, C);
        const Vec td = widen(table);
        EXPECT_EQ(widen(out), embedding_ref(ids, td, C));  // a copy: exact

        auto dout = random_values<T>(N * C, 20, -1.0f, 1.0f);
        const Vec w = widen(dout);
        auto dtable = random_values<float>(V * C, 21, -1.0f, 1.0f);  // accumulated (+=) onto this
        const Vec dtable0 = widen(dtable);
        embedding_backward(ids.data(), dout.data(), dtable.data(), N, V, C);
        expect_close(
            widen(dtable),
            add(dtable0,
                numeric_grad([&](const Vec& p) { return dot(w, embedding_ref(ids, p, C)); }, td)),
            kF32Tol, "dtable");
    }
}

TYPED_TEST(KernelTest, EmbeddingRejectsOutOfRangeIds) {
    using T = TypeParam;
    std::vector<T> table(11 * 5), out(3 * 5);
    std::vector<float> dtable(11 * 5);
    for (int32_t bad : {11, -1}) {
        std::vector<int32_t> ids = {0, bad, 3};
        try {
            embedding_forward(ids.data(), table.data(), out.data(), 3, 11, 5);
            FAIL() << "expected an error for id " << bad;
        } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::kInput);
            EXPECT_NE(e.message().find("id " + std::to_string(bad)), std::string::npos)
                << e.message();
            EXPECT_NE(e.message().find("V = 11"), std::string::npos) << e.message();
        }
        EXPECT_THROW(embedding_backward(ids.data(), out.data(), dtable.data(), 3, 11, 5), Error);
    }
}

// Every output of every kernel on one (N, C) problem, as bytes.
template <typename T>
std::vector<std::vector<char>> run_all_kernels(int64_t N, int64_t C) {
    std::vector<std::vector<char>> out;
    auto keep = [&](const auto& v) {
        const char* p = reinterpret_cast<const char*>(v.data());
        out.emplace_back(p, p + v.size() * sizeof(v[0]));
    };
    auto x = random_values<T>(N * C, 22, -2.0f, 2.0f);
    auto dy = random_values<T>(N * C, 23, -1.0f, 1.0f);
    auto gamma = random_values<T>(C, 24, 0.5f, 1.5f);
    std::vector<T> y(N * C), dx(N * C);
    std::vector<float> mean(N), rstd(N), dgamma(C, 0.5f), dbeta(C, 0.5f), db(C, 0.5f);
    layernorm_forward(x.data(), gamma.data(), gamma.data(), y.data(), mean.data(), rstd.data(), N,
                      C, 1e-5f);
    layernorm_backward(dy.data(), x.data(), gamma.data(), mean.data(), rstd.data(), dx.data(),
                       dgamma.data(), dbeta.data(), N, C);
    keep(y), keep(mean), keep(rstd), keep(dx), keep(dgamma), keep(dbeta);
    bias_backward(dy.data(), db.data(), N, C);
    keep(db);
    gelu_forward(x.data(), y.data(), N * C);
    gelu_backward(x.data(), dy.data(), dx.data(), N * C);
    keep(y), keep(dx);
    softmax_forward(x.data(), y.data(), N, C);
    softmax_backward(y.data(), dy.data(), dx.data(), N, C);
    keep(y), keep(dx);
    std::vector<int32_t> ids(N);
    for (int64_t i = 0; i < N; ++i) ids[i] = static_cast<int32_t>((i * 7) % 13);  // repeats
    std::vector<float> losses(N), lse(N), dloss(N, 1.0f), dtable(13 * C, 0.5f);
    cross_entropy_forward(x.data(), ids.data(), losses.data(), lse.data(), N, C);
    cross_entropy_backward(x.data(), ids.data(), lse.data(), dloss.data(), dx.data(), N, C);
    keep(losses), keep(lse), keep(dx);
    embedding_backward(ids.data(), dy.data(), dtable.data(), N, 13, C);
    keep(dtable);
    return out;
}

// Large enough that every kernel runs its parallel path at 2 threads, with 301 rows (10 of the
// layernorm reduction's 32-row chunks, split unevenly over threads) and 203 columns (4 blocks of
// 64 and a partial one for the column-parallel reductions).
TYPED_TEST(KernelTest, ResultsDoNotDependOnThreadCount) {
    const int64_t N = 301, C = 203;
    struct Restore {
        ~Restore() { set_num_threads(1); }
    } restore;
    set_num_threads(1);
    const auto one = run_all_kernels<TypeParam>(N, C);
    set_num_threads(2);
    const auto two = run_all_kernels<TypeParam>(N, C);
    const auto again = run_all_kernels<TypeParam>(N, C);
    ASSERT_EQ(one.size(), two.size());
    for (size_t k = 0; k < one.size(); ++k) {
        EXPECT_TRUE(one[k] == two[k]) << "output " << k << " differs between 1 and 2 threads";
        EXPECT_TRUE(two[k] == again[k]) << "output " << k << " differs between two runs";
    }
}

}  // namespace
}  // namespace zt::kernels
