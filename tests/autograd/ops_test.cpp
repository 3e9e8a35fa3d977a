// Gradient checks for every op in autograd/ops.h: the tape's gradients against central finite
// differences of the op's own forward (f32, tape off), bf16 tape gradients against the f32 tape, and
// the tape's bookkeeping: parameter gradients accumulate across backward passes, the tape empties,
// saved activations are freed as backward goes. Sizes are tiny and odd so that no kernel's vector
// width or tile divides them. Weights are arena parameters (ParamHolder + ParamArena), so parameter
// gradients are the arena's; other inputs are activation Vars with requires_grad.
#include "autograd/ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "autograd/module.h"
#include "autograd/param_arena.h"
#include "util/random.h"

namespace zt {
namespace {

// A module that only declares parameters, so op tests get arena-backed weights.
class ParamHolder : public Module {
public:
    Parameter& add(const std::string& name, const Shape& shape, float std) {
        return register_parameter(name, shape, ParamInit::normal(std), shape.size() == 2);
    }
};

float round_bf16(float x) { return bf16_to_f32(f32_to_bf16(x)); }

// n values uniform in [-range, range), rounded to bf16 so f32 and bf16 runs see the same inputs.
std::vector<float> bf16_uniform(int64_t n, uint64_t seed, float range) {
    Rng rng(seed);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = round_bf16(static_cast<float>((2.0 * rng.uniform() - 1.0) * range));
    return v;
}

Tensor tensor_from(MemoryPool& pool, const Shape& shape, const std::vector<float>& v, DType dt) {
    Tensor f = Tensor::empty(pool, shape, DType::kF32, MemCategory::kActivations);
    std::copy(v.begin(), v.end(), f.data<float>());
    if (dt == DType::kF32) return f;
    return f.to(dt, MemCategory::kActivations);
}

// loss = sum_i r_i y_i (summed in double) as a scalar f32 Var; backward writes dy = r * dloss.
// A test-local op, so each op's gradient is checked under an arbitrary upstream gradient.
Var weighted_sum(Tape& tape, const Var& y, const std::vector<float>& r) {
    std::vector<float> yv = y->value.to_vector();
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
        Tensor dy32 = Tensor::empty(tape.pool(), y->value.shape(), DType::kF32,
                                    MemCategory::kActivations);
        for (int64_t i = 0; i < dy32.numel(); ++i) dy32.data<float>()[i] = g * r[i];
        Tensor dy = tape.new_grad(y);
        dy.copy_from(dy32);
        Tape::add_grad(y, std::move(dy));
    });
    return lv;
}

// An op under test: parameters (normal init), activation inputs (uniform), and the forward,
// which returns the op's output; non-scalar outputs are reduced by weighted_sum.
struct OpSpec {
    std::vector<std::pair<std::string, Shape>> params;
    std::vector<Shape> inputs;
    std::function<Var(Tape&, const std::vector<Var>& params, const std::vector<Var>& inputs)> fwd;
    float param_std = 0.5f;
    float input_range = 1.0f;
    bool scalar_output = false;  // fwd returns the loss itself (cross_entropy)
};

// One instance of an OpSpec in one compute dtype. Weights and inputs are bf16-representable, so
// the f32 and bf16 instances start from identical values.
class OpRun {
public:
    OpRun(const OpSpec& spec, DType dt, DType grad_dtype = DType::kF32) : spec_(spec) {
        for (auto& [name, shape] : spec.params) holder_.add(name, shape, spec.param_std);
        arena_ = std::make_unique<ParamArena>(
            pool_, holder_.parameters(),
            ArenaOptions{.compute_dtype = dt, .grad_dtype = grad_dtype});
        arena_->init_weights(7);
        float* m = arena_->master().data<float>();
        for (int64_t i = 0; i < arena_->padded_numel(); ++i) m[i] = round_bf16(m[i]);
        arena_->sync_compute();
        for (Parameter* p : arena_->params()) params_.push_back(p->var);
        for (size_t i = 0; i < spec.inputs.size(); ++i) {
            const Shape& s = spec.inputs[i];
            auto v = bf16_uniform(shape_numel(s), 100 + i, spec.input_range);
            inputs_.push_back(make_var(tensor_from(pool_, s, v, dt), true));
        }
    }

    Tape& tape() { return tape_; }
    MemoryPool& pool() { return pool_; }
    ParamArena& arena() { return *arena_; }
    const std::vector<Var>& inputs() const { return inputs_; }

    Var loss() {
        Var y = spec_.fwd(tape_, params_, inputs_);
        if (spec_.scalar_output) return y;
        if (r_.empty()) r_ = bf16_uniform(y->value.numel(), 99, 1.0f);
        return weighted_sum(tape_, y, r_);
    }
    void backward() {
        Var l = loss();
        tape_.backward(l);
    }
    // The loss with the tape off (for finite differences).
    double eval() {
        tape_.set_recording(false);
        double l = loss()->value.to_vector()[0];
        tape_.set_recording(true);
        return l;
    }

    // Gradients of parameter i, then of input i, as f32.
    std::vector<float> param_grad(size_t i) { return arena_->params()[i]->grad.to_vector(); }
    std::vector<float> input_grad(size_t i) { return inputs_[i]->grad.to_vector(); }

    // Writable f32 values (f32 runs only; there the compute weights alias the master weights).
    float* param_data(size_t i) { return arena_->params()[i]->master.data<float>(); }
    float* input_data(size_t i) { return inputs_[i]->value.data<float>(); }

private:
    const OpSpec& spec_;
    MemoryPool pool_;
    Tape tape_{pool_};
    ParamHolder holder_;
    std::unique_ptr<ParamArena> arena_;
    std::vector<Var> params_, inputs_;
    std::vector<float> r_;
};

// Counts elements outside |got - want| <= atol + rtol |want| and reports the first few.
void expect_close(const std::string& what, const std::vector<float>& got,
                  const std::vector<double>& want, double atol, double rtol) {
    ASSERT_EQ(got.size(), want.size()) << what;
    int bad = 0;
    for (size_t j = 0; j < got.size(); ++j) {
        const double err = std::abs(got[j] - want[j]);
        if (err <= atol + rtol * std::abs(want[j])) continue;
        if (++bad <= 5)
            ADD_FAILURE() << what << "[" << j << "]: tape " << got[j] << ", expected " << want[j]
                          << " (error " << err << ")";
    }
    EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << got.size() << " elements differ";
}

// Central difference of run.eval() in value x, with the step actually taken in f32.
double central_difference(OpRun& run, float& x, float eps) {
    const float x0 = x;
    const float hi = x0 + eps, lo = x0 - eps;
    x = hi;
    const double lp = run.eval();
    x = lo;
    const double lm = run.eval();
    x = x0;
    return (lp - lm) / (static_cast<double>(hi) - lo);
}

// Note [FD tolerance]: f32 forward, eps = 1e-2. The truncation error is eps^2/6 |f'''|, about
// 2e-5 for these O(1) functions; the rounding error of one loss evaluation (O(10) f32 terms of
// O(1), summed in double at the end) is about 1e-6, divided by 2 eps: 5e-5. The largest error
// seen over all cases below was 5e-5 (the chain's embedding), most were near 1e-5; atol 5e-4 +
// rtol 5e-3 leaves a 10x margin while a wrong factor, sign, index or a missing term (errors of
// O(0.1) to O(1) here) fails.
constexpr float kFdEps = 1e-2f;
constexpr double kFdAtol = 5e-4, kFdRtol = 5e-3;

void check_fd(const OpSpec& spec) {
    OpRun run(spec, DType::kF32);
    run.backward();
    EXPECT_EQ(run.tape().size(), 0u) << "tape not empty after backward";
    for (size_t i = 0; i < spec.params.size(); ++i) {
        std::vector<float> g = run.param_grad(i);
        std::vector<double> fd(g.size());
        for (size_t j = 0; j < g.size(); ++j)
            fd[j] = central_difference(run, run.param_data(i)[j], kFdEps);
        expect_close("d" + spec.params[i].first, g, fd, kFdAtol, kFdRtol);
    }
    for (size_t i = 0; i < spec.inputs.size(); ++i) {
        ASSERT_TRUE(run.inputs()[i]->grad.defined()) << "input " << i << " got no gradient";
        std::vector<float> g = run.input_grad(i);
        std::vector<double> fd(g.size());
        for (size_t j = 0; j < g.size(); ++j)
            fd[j] = central_difference(run, run.input_data(i)[j], kFdEps);
        expect_close("dinput" + std::to_string(i), g, fd, kFdAtol, kFdRtol);
    }
}

// Note [bf16 tolerance]: the bf16 run starts from the same (bf16-representable) weights and
// inputs as the f32 run; it differs by rounding activations and activation gradients to bf16
// (relative 2^-9 = 2e-3 each) through one to eight ops and their reductions. The largest
// difference seen was 0.55% of the tensor's largest gradient (the chain's LayerNorm weight); we
// allow 2%, while a kernel that mishandles bf16 (wrong conversion, dropped accumulation) is off
// by O(100%).
constexpr double kBf16Rel = 2e-2;

std::vector<double> scaled_atol_ref(const std::vector<float>& ref, double& atol) {
    double mx = 0;
    for (float v : ref) mx = std::max(mx, static_cast<double>(std::abs(v)));
    atol = kBf16Rel * std::max(mx, 1e-3);
    return {ref.begin(), ref.end()};
}

// bf16 compute with f32 gradients (the default) or bf16 gradients (grad_accum_dtype bf16, where
// f32 partial sums are added into the bf16 arena) against the f32 run.
void check_bf16(const OpSpec& spec, DType grad_dtype) {
    OpRun ref(spec, DType::kF32), run(spec, DType::kBF16, grad_dtype);
    ref.backward();
    run.backward();
    EXPECT_EQ(run.tape().size(), 0u);
    double atol = 0;
    for (size_t i = 0; i < spec.params.size(); ++i) {
        EXPECT_EQ(run.arena().params()[i]->grad.dtype(), grad_dtype);
        auto want = scaled_atol_ref(ref.param_grad(i), atol);
        expect_close("bf16 d" + spec.params[i].first, run.param_grad(i), want, atol, 0.0);
    }
    for (size_t i = 0; i < spec.inputs.size(); ++i) {
        ASSERT_EQ(run.inputs()[i]->grad.dtype(), DType::kBF16);
        auto want = scaled_atol_ref(ref.input_grad(i), atol);
        expect_close("bf16 dinput" + std::to_string(i), run.input_grad(i), want, atol, 0.0);
    }
}

void check_both(const OpSpec& spec) {
    {
        SCOPED_TRACE("f32 against finite differences");
        check_fd(spec);
    }
    {
        SCOPED_TRACE("bf16 against f32");
        check_bf16(spec, DType::kF32);
    }
    if (!spec.params.empty()) {
        SCOPED_TRACE("bf16 with bf16 gradients against f32");
        check_bf16(spec, DType::kBF16);
    }
}

TEST(OpsGrad, LinearWithBias) {
    // x: (3, 5), W: (7, 5), b: (7) -> (3, 7)
    OpSpec s;
    s.params = {{"weight", {7, 5}}, {"bias", {7}}};
    s.inputs = {{3, 5}};
    s.fwd = [](Tape& t, const std::vector<Var>& p, const std::vector<Var>& in) {
        return ops::linear(t, in[0], p[0], &p[1]);
    };
    check_both(s);
}

TEST(OpsGrad, LinearWithoutBias3d) {
    // x: (2, 3, 5) flattened to 6 rows, W: (4, 5) -> (2, 3, 4)
    OpSpec s;
    s.params = {{"weight", {4, 5}}};
    s.inputs = {{2, 3, 5}};
    s.fwd = [](Tape& t, const std::vector<Var>& p, const std::vector<Var>& in) {
        Var y = ops::linear(t, in[0], p[0], nullptr);
        EXPECT_EQ(y->value.shape(), (Shape{2, 3, 4}));
        return y;
    };
    check_both(s);
}

TEST(OpsGrad, LinearForwardMatchesReference) {
    // y[n][o] = sum_i x[n][i] W[o][i] + b[o], in double.
    OpSpec s;
    s.params = {{"weight", {7, 5}}, {"bias", {7}}};
    s.inputs = {{3, 5}};
    OpRun run(s, DType::kF32);
    Var y = ops::linear(run.tape(), run.inputs()[0], run.arena().params()[0]->var,
                        &run.arena().params()[1]->var);
    run.tape().clear();
    std::vector<float> x = run.inputs()[0]->value.to_vector();
    std::vector<float> w = run.arena().params()[0]->master.to_vector();
    std::vector<float> b = run.arena().params()[1]->master.to_vector(), got = y->value.to_vector();
    std::vector<double> want(21);
    for (int n = 0; n < 3; ++n)
        for (int o = 0; o < 7; ++o) {
            double acc = b[o];
            for (int i = 0; i < 5; ++i) acc += static_cast<double>(x[n * 5 + i]) * w[o * 5 + i];
            want[n * 7 + o] = acc;
        }
    expect_close("linear y", got, want, 1e-5, 1e-5);  // f32 dot products of 5 terms of O(1)
}

TEST(OpsGrad, ConstantInputGetsNoGradient) {
    // x does not require grad: only W's gradient is produced.
    OpSpec s;
    s.params = {{"weight", {4, 5}}};
    s.inputs = {{3, 5}};
    OpRun run(s, DType::kF32);
    Var x = make_var(run.inputs()[0]->value, false);
    Var y = ops::linear(run.tape(), x, run.arena().params()[0]->var, nullptr);
    EXPECT_EQ(run.tape().size(), 1u);
    Var l = weighted_sum(run.tape(), y, std::vector<float>(12, 1.0f));
    run.tape().backward(l);
    EXPECT_FALSE(x->grad.defined());
    double norm = 0;
    for (float g : run.param_grad(0)) norm += std::abs(g);
    EXPECT_GT(norm, 0.0);
}

TEST(OpsGrad, NothingRequiresGradRecordsNothing) {
    // With no input requiring grad, ops record nothing even while the tape records.
    OpSpec s;
    s.inputs = {{3, 5}, {4, 5}, {4}};
    OpRun run(s, DType::kF32);
    Var x = make_var(run.inputs()[0]->value, false);
    Var w = make_var(run.inputs()[1]->value, false);
    Var b = make_var(run.inputs()[2]->value, false);
    Var y = ops::linear(run.tape(), x, w, &b);
    Var z = ops::gelu(run.tape(), ops::add(run.tape(), y, y));
    EXPECT_FALSE(z->requires_grad);
    EXPECT_EQ(run.tape().size(), 0u);
}

// add's backward gives W and P one shared buffer, then linear's backward accumulates dW into it
// in place (GEMM with beta 1): Tape::grad_zeros must copy on write as Tape::add_grad does, or P's
// gradient is corrupted. The same holds for every slot filled through grad_zeros / with_f32_grad
// (linear bias, layernorm gamma and beta, embedding table) when a non-parameter Var sits there.
TEST(OpsGrad, SharedGradientInWeightSlot) {
    static const std::vector<float> r1 = bf16_uniform(12, 1, 1.0f), r2 = bf16_uniform(20, 2, 1.0f);
    OpSpec s;
    s.inputs = {{3, 5}, {4, 5}, {4, 5}};  // x, W, P
    s.scalar_output = true;
    s.fwd = [](Tape& t, const std::vector<Var>&, const std::vector<Var>& in) {
        Var y = ops::linear(t, in[0], in[1], nullptr);
        Var sum = ops::add(t, in[1], in[2]);
        return ops::add(t, weighted_sum(t, y, r1), weighted_sum(t, sum, r2));
    };
    check_fd(s);
}

// A parameter's Var as an op's activation input (ops::add(x, pos.var), gelu of a parameter, a
// parameter as linear's x) reaches Tape::add_grad, which must accumulate into the arena gradient.
TEST(OpsGrad, ParameterAsActivationInput) {
    OpSpec s;
    s.params = {{"pos", {3, 5}}};
    s.inputs = {{3, 5}};
    s.fwd = [](Tape& t, const std::vector<Var>& p, const std::vector<Var>& in) {
        return ops::add(t, in[0], ops::gelu(t, p[0]));
    };
    check_both(s);
}

// ops::linear passes its null bias pointer to needs_grad, which must skip null entries (this
// crashed before), reached when neither x nor W requires grad.
TEST(OpsGrad, LinearWithoutBiasNothingRequiresGrad) {
    OpSpec s;
    s.inputs = {{3, 5}, {4, 5}};
    OpRun run(s, DType::kF32);
    Var x = make_var(run.inputs()[0]->value, false);
    Var w = make_var(run.inputs()[1]->value, false);
    Var y = ops::linear(run.tape(), x, w, nullptr);
    EXPECT_FALSE(y->requires_grad);
    EXPECT_EQ(run.tape().size(), 0u);
}

TEST(OpsGrad, LayerNorm) {
    // x: (3, 5), gamma, beta: (5) -> (3, 5)
    OpSpec s;
    s.params = {{"gamma", {5}}, {"beta", {5}}};
    s.inputs = {{3, 5}};
    s.fwd = [](Tape& t, const std::vector<Var>& p, const std::vector<Var>& in) {
        return ops::layernorm(t, in[0], p[0], p[1], 1e-5f);
    };
    check_both(s);
}

TEST(OpsGrad, Gelu) {
    // x: (3, 7), over [-3, 3] to reach both tails of the tanh.
    OpSpec s;
    s.inputs = {{3, 7}};
    s.input_range = 3.0f;
    s.fwd = [](Tape& t, const std::vector<Var>&, const std::vector<Var>& in) {
        return ops::gelu(t, in[0]);
    };
    check_both(s);
}

TEST(OpsGrad, Add) {
    OpSpec s;
    s.inputs = {{3, 5}, {3, 5}};
    s.fwd = [](Tape& t, const std::vector<Var>&, const std::vector<Var>& in) {
        return ops::add(t, in[0], in[1]);
    };
    check_both(s);
}

TEST(OpsGrad, AddToItself) {
    // y = x + x: dx = 2 dy, from one add writing dy into the same Var twice.
    OpSpec s;
    s.inputs = {{3, 5}};
    s.fwd = [](Tape& t, const std::vector<Var>&, const std::vector<Var>& in) {
        return ops::add(t, in[0], in[0]);
    };
    check_both(s);
}

TEST(OpsGrad, TwoConsumers) {
    // y = gelu(x) + x: x's gradient is the sum over its two consumers.
    OpSpec s;
    s.inputs = {{3, 5}};
    s.fwd = [](Tape& t, const std::vector<Var>&, const std::vector<Var>& in) {
        return ops::add(t, ops::gelu(t, in[0]), in[0]);
    };
    check_both(s);
}

TEST(OpsGrad, SharedGradientIsCopiedBeforeAccumulating) {
    // g = gelu(a); s = a + b; y = s + g. Backward hands one buffer to s and g, then to a and b
    // (add shares dy between its inputs); gelu's gradient must then be added into a copy of a's,
    // or b's (and g's) gradient is corrupted.
    OpSpec s;
    s.inputs = {{3, 5}, {3, 5}};
    s.fwd = [](Tape& t, const std::vector<Var>&, const std::vector<Var>& in) {
        Var g = ops::gelu(t, in[0]);
        Var sum = ops::add(t, in[0], in[1]);
        return ops::add(t, sum, g);
    };
    check_both(s);
}

TEST(OpsGrad, EmbeddingRepeatedIds) {
    // table: (7, 5), ids: (7) with id 3 four times and rows 2, 4, 5 unused -> (7, 5)
    static const std::vector<int32_t> ids = {3, 1, 3, 3, 6, 0, 3};
    OpSpec s;
    s.params = {{"table", {7, 5}}};
    s.fwd = [](Tape& t, const std::vector<Var>& p, const std::vector<Var>&) {
        return ops::embedding(t, p[0], ids);
    };
    check_both(s);

    OpRun run(s, DType::kF32);
    run.backward();
    std::vector<float> g = run.param_grad(0);
    for (int row : {2, 4, 5})
        for (int c = 0; c < 5; ++c) EXPECT_EQ(g[row * 5 + c], 0.0f) << "unused row " << row;
}

TEST(OpsGrad, CausalAttention) {
    // qkv: (B=2, T=3, 3C=18), C = 6, H = 2 (head width 3) -> (2, 3, 6)
    OpSpec s;
    s.inputs = {{2 * 3, 18}};
    s.input_range = 1.5f;
    s.fwd = [](Tape& t, const std::vector<Var>&, const std::vector<Var>& in) {
        return ops::causal_attention(t, in[0], 2, 3, 6, 2);
    };
    check_both(s);
}

TEST(OpsGrad, CausalAttentionThreeHeads) {
    // qkv: (B=1, T=5, 3C=18), C = 6, H = 3 (head width 2) -> (1, 5, 6)
    OpSpec s;
    s.inputs = {{5, 18}};
    s.input_range = 1.5f;
    s.fwd = [](Tape& t, const std::vector<Var>&, const std::vector<Var>& in) {
        return ops::causal_attention(t, in[0], 1, 5, 6, 3);
    };
    check_both(s);
}

TEST(OpsGrad, AttentionAfterLinear) {
    // The GPT path: qkv = x W^T + b, then attention; W gets dqkv through linear.
    OpSpec s;
    s.params = {{"c_attn.weight", {12, 4}}, {"c_attn.bias", {12}}};
    s.inputs = {{2 * 3, 4}};
    s.fwd = [](Tape& t, const std::vector<Var>& p, const std::vector<Var>& in) {
        return ops::causal_attention(t, ops::linear(t, in[0], p[0], &p[1]), 2, 3, 4, 2);
    };
    check_both(s);
}

const std::vector<int32_t> kTargets = {2, -1, 6, 0, 2};  // row 1 ignored

TEST(OpsGrad, CrossEntropyIgnoresTarget) {
    // logits: (5, 7), targets with one -1 -> mean over the 4 counted rows of -log p[target]
    OpSpec s;
    s.inputs = {{5, 7}};
    s.input_range = 2.0f;
    s.scalar_output = true;
    s.fwd = [](Tape& t, const std::vector<Var>&, const std::vector<Var>& in) {
        return ops::cross_entropy(t, in[0], kTargets);
    };
    check_both(s);

    OpRun run(s, DType::kF32);
    std::vector<float> z = run.inputs()[0]->value.to_vector();
    double want = 0;
    for (int n = 0; n < 5; ++n) {
        if (kTargets[n] < 0) continue;
        double m = *std::max_element(z.begin() + n * 7, z.begin() + n * 7 + 7), sum = 0;
        for (int v = 0; v < 7; ++v) sum += std::exp(z[n * 7 + v] - m);
        want += m + std::log(sum) - z[n * 7 + kTargets[n]];
    }
    want /= 4;
    Var l = run.loss();
    EXPECT_NEAR(l->value.to_vector()[0], want, 1e-5);  // f32 log-sum-exp of 7 terms
    run.tape().backward(l);
    std::vector<float> g = run.input_grad(0);
    for (int v = 0; v < 7; ++v) EXPECT_EQ(g[7 + v], 0.0f) << "ignored row, column " << v;
}

TEST(OpsGrad, CrossEntropyAllIgnored) {
    // No counted rows: loss 0 and zero gradients, not NaN.
    OpSpec s;
    s.inputs = {{2, 3}};
    OpRun run(s, DType::kF32);
    const std::vector<int32_t> none = {-1, -1};
    Var l = ops::cross_entropy(run.tape(), run.inputs()[0], none);
    EXPECT_EQ(l->value.to_vector()[0], 0.0f);
    run.tape().backward(l);
    for (float g : run.input_grad(0)) EXPECT_EQ(g, 0.0f);
}

TEST(OpsGrad, CrossEntropyAfterLinear) {
    // The head: logits = x W^T (W a parameter), then cross_entropy with an ignored target.
    OpSpec s;
    s.params = {{"head", {7, 4}}};
    s.inputs = {{5, 4}};
    s.scalar_output = true;
    s.fwd = [](Tape& t, const std::vector<Var>& p, const std::vector<Var>& in) {
        return ops::cross_entropy(t, ops::linear(t, in[0], p[0], nullptr), kTargets);
    };
    check_both(s);
}

// A chain through every op on parameters only, as a model's loss is: ids -> embedding ->
// layernorm -> linear (qkv) -> attention -> gelu -> residual add -> linear (head) -> cross_entropy.
// B = 2, T = 3, C = 6, H = 2, V = 11.
OpSpec chain_spec() {
    static const std::vector<int32_t> ids = {4, 9, 4, 0, 10, 2};
    static const std::vector<int32_t> targets = {9, 4, -1, 10, 2, 2};
    OpSpec s;
    s.params = {{"wte", {11, 6}}, {"ln.weight", {6}}, {"ln.bias", {6}},
                {"qkv.weight", {18, 6}}, {"qkv.bias", {18}}, {"head", {11, 6}}};
    s.scalar_output = true;
    s.fwd = [](Tape& t, const std::vector<Var>& p, const std::vector<Var>&) {
        Var x = ops::embedding(t, p[0], ids);
        Var qkv = ops::linear(t, ops::layernorm(t, x, p[1], p[2], 1e-5f), p[3], &p[4]);
        Var r = ops::add(t, x, ops::gelu(t, ops::causal_attention(t, qkv, 2, 3, 6, 2)));
        return ops::cross_entropy(t, ops::linear(t, r, p[5], nullptr), targets);
    };
    return s;
}

TEST(OpsGrad, Chain) { check_both(chain_spec()); }

TEST(Tape, ParameterGradientsAccumulate) {
    // Two forward/backward passes without zeroing: every parameter gradient doubles. Not bit
    // exact: the second pass adds its own rounding (dW += inside the GEMM), so 1e-6 relative.
    OpSpec s = chain_spec();
    OpRun run(s, DType::kF32);
    run.backward();
    std::vector<float> once = run.arena().grads().to_vector();
    run.backward();
    std::vector<float> twice = run.arena().grads().to_vector();
    double norm = 0;
    std::vector<double> want(once.size());
    for (size_t i = 0; i < once.size(); ++i) {
        want[i] = 2.0 * once[i];
        norm += std::abs(once[i]);
    }
    EXPECT_GT(norm, 0.0);
    expect_close("twice", twice, want, 1e-7, 1e-6);

    run.arena().zero_grads();
    run.backward();
    std::vector<double> again(once.begin(), once.end());
    expect_close("after zero_grads", run.arena().grads().to_vector(), again, 1e-7, 1e-6);
}

TEST(Tape, ActivationInputGradientsAccumulate) {
    // A leaf activation keeps its gradient across passes; the second backward adds to it.
    OpSpec s;
    s.params = {{"weight", {4, 5}}};
    s.inputs = {{3, 5}};
    s.fwd = [](Tape& t, const std::vector<Var>& p, const std::vector<Var>& in) {
        return ops::linear(t, in[0], p[0], nullptr);
    };
    OpRun run(s, DType::kF32);
    run.backward();
    std::vector<float> once = run.input_grad(0);
    run.backward();
    std::vector<double> want(once.size());
    for (size_t i = 0; i < once.size(); ++i) want[i] = 2.0 * once[i];
    expect_close("dx twice", run.input_grad(0), want, 1e-7, 1e-6);
}

TEST(Tape, EmptyAfterBackwardAndActivationsFreed) {
    for (DType dt : {DType::kF32, DType::kBF16}) {
        SCOPED_TRACE(dtype_name(dt));
        OpSpec s = chain_spec();
        OpRun run(s, dt);
        const int act = static_cast<int>(MemCategory::kActivations);
        const int ws = static_cast<int>(MemCategory::kWorkspace);
        const MemoryStats before = run.pool().stats();

        // A probe recorded first runs last in backward, after every other entry was dropped:
        // by then only the loss Var itself may still hold activation memory.
        int64_t act_at_probe = -1;
        run.tape().push("probe", [&] { act_at_probe = run.pool().stats().current[act]; });
        Var loss = run.loss();
        const size_t entries = run.tape().size();
        EXPECT_EQ(entries, 9u);  // probe + 8 ops
        const int64_t loss_bytes = 64;  // a 4-byte f32 scalar rounded to the pool's 64-byte blocks
        EXPECT_GT(run.pool().stats().current[act], before.current[act] + loss_bytes);

        run.tape().backward(loss);
        EXPECT_EQ(run.tape().size(), 0u);
        EXPECT_EQ(act_at_probe, before.current[act] + loss_bytes);
        EXPECT_FALSE(loss->grad.defined());
        loss.reset();
        const MemoryStats after = run.pool().stats();
        EXPECT_EQ(after.current[act], before.current[act]);
        EXPECT_EQ(after.current[ws], before.current[ws]);
    }
}

TEST(Tape, RecordingOffRecordsNothing) {
    OpSpec s = chain_spec();
    OpRun run(s, DType::kF32);
    const int64_t act = run.pool().stats().current[static_cast<int>(MemCategory::kActivations)];
    run.tape().set_recording(false);
    Var loss = run.loss();
    EXPECT_EQ(run.tape().size(), 0u);
    EXPECT_FALSE(loss->requires_grad);
    loss.reset();
    EXPECT_EQ(run.pool().stats().current[static_cast<int>(MemCategory::kActivations)], act);
}

}  // namespace
}  // namespace zt
