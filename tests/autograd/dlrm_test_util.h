// Shared helpers for the DLRM op tests (embedding_bag, dot_interaction, bce_with_logits, relu):
// bf16-representable inputs, Vars for activations and parameters, a weighted-sum loss so every
// output element gets its own upstream gradient, closeness checks against double references and
// central finite differences with the step taken in f32.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "tensor/threads.h"
#include "util/random.h"

namespace zt::dlrm_test {

inline float round_bf16(float x) { return bf16_to_f32(f32_to_bf16(x)); }

// n values uniform in [-range, range), rounded to bf16 so f32 and bf16 runs see the same inputs.
inline std::vector<float> uniform_values(int64_t n, uint64_t seed, float range) {
    Rng rng(seed);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = round_bf16(static_cast<float>((2.0 * rng.uniform() - 1.0) * range));
    return v;
}

inline Tensor make_tensor(MemoryPool& pool, const Shape& shape, const std::vector<float>& v,
                          DType dt) {
    Tensor f = Tensor::empty(pool, shape, DType::kF32, MemCategory::kActivations);
    std::copy(v.begin(), v.end(), f.data<float>());
    return dt == DType::kF32 ? f : f.to(dt, MemCategory::kActivations);
}

// An activation input that requires grad.
inline Var make_input(MemoryPool& pool, const Shape& shape, const std::vector<float>& v, DType dt) {
    return make_var(make_tensor(pool, shape, v, dt), true);
}

// A parameter whose f32 gradient starts at grad0 (so tests see += into it, as in the arena).
inline Var make_param(MemoryPool& pool, const Shape& shape, const std::vector<float>& v, DType dt,
                      const std::vector<float>& grad0) {
    Var p = make_var(make_tensor(pool, shape, v, dt), true);
    p->is_param = true;
    p->grad = make_tensor(pool, shape, grad0, DType::kF32);
    return p;
}

// loss = sum_i r_i y_i (summed in double) as a scalar f32 Var; backward writes dy = r * dloss.
inline Var weighted_sum(Tape& tape, const Var& y, const std::vector<float>& r) {
    std::vector<float> yv = y->value.to_vector();
    EXPECT_EQ(yv.size(), r.size());
    double s = 0;
    for (size_t i = 0; i < yv.size(); ++i) s += static_cast<double>(r[i]) * yv[i];
    Tensor out = Tensor::empty(tape.pool(), {1}, DType::kF32, MemCategory::kActivations);
    out.data<float>()[0] = static_cast<float>(s);
    Var lv = make_var(out, needs_grad(tape, {&y}));
    if (!lv->requires_grad) return lv;
    tape.push("weighted_sum", [&tape, y, lv, r] {
        Tensor dl = lv->grad;
        lv->grad = Tensor();
        if (!dl.defined()) return;
        const float g = dl.data<float>()[0];
        std::vector<float> d(r.size());
        for (size_t i = 0; i < r.size(); ++i) d[i] = g * r[i];
        Tape::add_grad(y, make_tensor(tape.pool(), y->value.shape(), d, y->value.dtype()));
    });
    return lv;
}

// Counts elements outside |got - want| <= atol + rtol |want| and reports the first few.
inline void expect_close(const std::string& what, const std::vector<float>& got,
                         const std::vector<double>& want, double atol, double rtol) {
    ASSERT_EQ(got.size(), want.size()) << what;
    int bad = 0;
    for (size_t j = 0; j < got.size(); ++j) {
        const double err = std::abs(got[j] - want[j]);
        if (err <= atol + rtol * std::abs(want[j])) continue;
        if (++bad <= 5)
            ADD_FAILURE() << what << "[" << j << "]: got " << got[j] << ", expected " << want[j]
                          << " (error " << err << ")";
    }
    EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << got.size() << " elements differ";
}

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Central difference of loss() in the f32 value x, with the step actually taken in f32.
inline double central_difference(const std::function<double()>& loss, float& x, float eps) {
    const float x0 = x, hi = x0 + eps, lo = x0 - eps;
    x = hi;
    const double lp = loss();
    x = lo;
    const double lm = loss();
    x = x0;
    return (lp - lm) / (static_cast<double>(hi) - lo);
}

// Finite-difference gradient of loss() over every element of an f32 tensor.
inline std::vector<double> fd_gradient(const std::function<double()>& loss, Tensor& t, float eps) {
    std::vector<double> g(static_cast<size_t>(t.numel()));
    float* p = t.data<float>();
    for (size_t i = 0; i < g.size(); ++i) g[i] = central_difference(loss, p[i], eps);
    return g;
}

// Runs fn with n intra-op threads, then restores one (the test default, tests/test_main.cpp).
template <typename F>
void with_threads(int n, F fn) {
    struct Restore {
        ~Restore() { set_num_threads(1); }
    } restore;
    set_num_threads(n);
    fn();
}

// Expects fn to throw zt::Error whose message contains every one of parts.
template <typename F>
void expect_error(F fn, const std::vector<std::string>& parts) {
    try {
        fn();
        ADD_FAILURE() << "expected a zt::Error containing '" << parts.at(0) << "'";
    } catch (const Error& e) {
        for (const std::string& s : parts)
            EXPECT_NE(e.message().find(s), std::string::npos)
                << "message '" << e.message() << "' lacks '" << s << "'";
    }
}

}  // namespace zt::dlrm_test
