// Recompute regions (autograd/checkpoint.h) on a small residual MLP: the loss, the input's
// gradient and every parameter gradient bit-identical to the same function without the region
// (f32 and bf16), with the input also used outside the region (the gradient order of Note [Exact
// recompute]), across accumulated backward passes and nested regions; hooks fire again during the
// recompute; the region keeps only its output; evaluation runs the function plainly.
// Letters: N rows, C features, V classes.
#include "autograd/checkpoint.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "autograd/module.h"
#include "autograd/ops.h"
#include "autograd/param_arena.h"
#include "util/random.h"

namespace zt {
namespace {

constexpr int64_t kN = 7, kC = 12, kV = 5;  // odd sizes: no kernel's vector width divides them

// x: (N, C) -> x + fc2(gelu(fc1(layernorm(x)))); fc1: (2C, C) with bias, fc2: (C, 2C).
class ResMlp : public Module {
public:
    explicit ResMlp(int64_t C)
        : gamma(register_parameter("ln.weight", {C}, ParamInit::ones(), false)),
          beta(register_parameter("ln.bias", {C}, ParamInit::zeros(), false)),
          fc1(register_parameter("fc1.weight", {2 * C, C}, ParamInit::normal(0.3f), true)),
          fc1_bias(register_parameter("fc1.bias", {2 * C}, ParamInit::normal(0.1f), false)),
          fc2(register_parameter("fc2.weight", {C, 2 * C}, ParamInit::normal(0.3f), true)) {}
    Var forward(Tape& t, const Var& x) {
        return call(t, [&] {
            Var h = ops::layernorm(t, x, gamma.var, beta.var, 1e-5f);
            h = ops::gelu(t, ops::linear(t, h, fc1.var, &fc1_bias.var));
            return ops::add(t, x, ops::linear(t, h, fc2.var, nullptr));
        });
    }
    Parameter &gamma, &beta, &fc1, &fc1_bias, &fc2;
};

enum class Mode { kPlain, kRegion, kNested };

// loss = CE(head(r2(r1(in W0^T)) + x W_side^T)): x = in W0^T is an activation used by r1 and,
// after it, by the side linear, so its gradient collects from both sides of a region.
class Net : public Module {
public:
    Net()
        : w0(register_parameter("w0", {kC, kC}, ParamInit::normal(0.3f), true)),
          side(register_parameter("side", {kC, kC}, ParamInit::normal(0.3f), true)),
          head(register_parameter("head", {kV, kC}, ParamInit::normal(0.3f), true)),
          r1(register_module<ResMlp>("r1", kC)),
          r2(register_module<ResMlp>("r2", kC)) {}

    Var loss(Tape& t, const Var& in, Mode mode) {
        Var x = ops::linear(t, in, w0.var, nullptr);
        Var y;
        if (mode == Mode::kPlain) {
            y = r2.forward(t, r1.forward(t, x));
        } else if (mode == Mode::kRegion) {
            y = checkpoint(t, {x}, [this](Tape& tt, const std::vector<Var>& v) {
                return r2.forward(tt, r1.forward(tt, v[0]));
            });
        } else {  // a region around r1 and a region inside it around r2
            y = checkpoint(t, {x}, [this](Tape& tt, const std::vector<Var>& v) {
                Var h = r1.forward(tt, v[0]);
                return checkpoint(tt, {h}, [this](Tape& t2, const std::vector<Var>& w) {
                    return r2.forward(t2, w[0]);
                });
            });
        }
        Var z = ops::add(t, y, ops::linear(t, x, side.var, nullptr));
        return ops::cross_entropy(t, ops::linear(t, z, head.var, nullptr),
                                  std::vector<int32_t>{0, 4, 1, 3, 2, 2, 0});
    }
    Parameter &w0, &side, &head;
    ResMlp& r1;
    ResMlp& r2;
};

struct Result {
    std::vector<float> losses;
    std::vector<float> grads;    // the whole gradient arena
    std::vector<float> in_grad;  // the input's gradient, through x
};

// in: (N, C) with values rounded to bf16, so f32 and bf16 runs see the same data.
Var make_input(MemoryPool& pool, DType dt) {
    Tensor f = Tensor::empty(pool, {kN, kC}, DType::kF32, MemCategory::kActivations);
    Rng rng(7);
    for (int64_t i = 0; i < kN * kC; ++i)
        f.data<float>()[i] = bf16_to_f32(f32_to_bf16(static_cast<float>(2 * rng.uniform() - 1)));
    return make_var(f.to(dt, MemCategory::kActivations), true);  // a leaf: keeps its gradient
}

Result train(Mode mode, DType dt, int passes) {
    MemoryPool pool;
    Tape tape(pool);
    Net net;
    ParamArena arena(pool, net.parameters(), ArenaOptions{.compute_dtype = dt});
    arena.init_weights(3);
    arena.sync_compute();
    Var in = make_input(pool, dt);
    Result r;
    for (int p = 0; p < passes; ++p) {  // parameter gradients accumulate over the passes
        Var loss = net.loss(tape, in, mode);
        r.losses.push_back(loss->value.data<float>()[0]);
        tape.backward(loss);
        EXPECT_EQ(tape.size(), 0u);
    }
    r.grads = arena.grads().to_vector();
    r.in_grad = in->grad.to_vector();
    return r;
}

TEST(Checkpoint, BitIdenticalToPlainF32AndBf16) {
    for (DType dt : {DType::kF32, DType::kBF16}) {
        Result plain = train(Mode::kPlain, dt, 2);
        for (Mode mode : {Mode::kRegion, Mode::kNested}) {
            Result ck = train(mode, dt, 2);
            const char* what = mode == Mode::kRegion ? "region" : "nested";
            EXPECT_EQ(ck.losses, plain.losses) << dtype_name(dt) << " " << what;
            EXPECT_EQ(ck.in_grad, plain.in_grad) << dtype_name(dt) << " " << what;
            ASSERT_EQ(ck.grads.size(), plain.grads.size());
            for (size_t i = 0; i < ck.grads.size(); ++i)
                ASSERT_EQ(ck.grads[i], plain.grads[i]) << dtype_name(dt) << " " << what << " " << i;
        }
        for (float g : plain.grads) EXPECT_NE(g, 0.0f);  // every parameter gets a gradient
    }
}

TEST(Checkpoint, ParametersInsideAccumulateAcrossPasses) {
    // The same inputs twice: the second pass adds about as much again (GEMM accumulation rounds
    // differently from doubling, so not bit for bit; seen below 1e-6 relative).
    Result one = train(Mode::kRegion, DType::kF32, 1);
    Result two = train(Mode::kRegion, DType::kF32, 2);
    for (size_t i = 0; i < one.grads.size(); ++i)
        EXPECT_NEAR(two.grads[i], 2 * one.grads[i], 1e-5 * std::abs(one.grads[i])) << i;
}

const char* point_name(HookPoint p) {
    switch (p) {
        case HookPoint::kPreForward: return "pre_forward";
        case HookPoint::kPostForward: return "post_forward";
        case HookPoint::kPreBackward: return "pre_backward";
        case HookPoint::kPostBackward: return "post_backward";
    }
    return "?";
}

std::vector<std::string> hook_events(Mode mode, std::vector<std::string>* backward_part) {
    MemoryPool pool;
    Tape tape(pool);
    Net net;
    ParamArena arena(pool, net.parameters(), ArenaOptions{});
    arena.init_weights(3);
    std::vector<std::string> ev;
    for (auto [m, label] : {std::pair<Module*, std::string>{&net.r1, "r1"}, {&net.r2, "r2"}})
        for (HookPoint p : {HookPoint::kPreForward, HookPoint::kPostForward,
                            HookPoint::kPreBackward, HookPoint::kPostBackward})
            m->add_hook(p, [&ev, label, p](Module&) { ev.push_back(label + " " + point_name(p)); });
    Var loss = net.loss(tape, make_input(pool, DType::kF32), mode);
    ev.push_back("backward");
    tape.backward(loss);
    auto at = std::find(ev.begin(), ev.end(), "backward");
    backward_part->assign(at + 1, ev.end());
    return ev;
}

TEST(Checkpoint, HooksFireAgainDuringRecompute) {
    std::vector<std::string> plain_bwd, ck_bwd;
    hook_events(Mode::kPlain, &plain_bwd);
    std::vector<std::string> ev = hook_events(Mode::kRegion, &ck_bwd);
    const std::vector<std::string> forward = {"r1 pre_forward", "r1 post_forward",
                                              "r2 pre_forward", "r2 post_forward"};
    std::vector<std::string> expected = forward;
    expected.push_back("backward");
    // The recompute runs the forward hooks again (ZeRO-3 gathers there), then backward runs the
    // backward hooks once, in the order the plain run has them.
    expected.insert(expected.end(), forward.begin(), forward.end());
    expected.insert(expected.end(), {"r2 pre_backward", "r2 post_backward", "r1 pre_backward",
                                     "r1 post_backward"});
    EXPECT_EQ(ev, expected);
    EXPECT_EQ(plain_bwd, (std::vector<std::string>{"r2 pre_backward", "r2 post_backward",
                                                   "r1 pre_backward", "r1 post_backward"}));
}

// Activation bytes live after the forward (rounded per tensor as the pool does).
int64_t rounded(int64_t bytes) { return (bytes + 63) / 64 * 64; }

int64_t stored_after_forward(Mode mode) {
    MemoryPool pool;
    Tape tape(pool);
    Net net;
    ParamArena arena(pool, net.parameters(), ArenaOptions{});
    arena.init_weights(3);
    Var in = make_input(pool, DType::kF32);
    const int64_t before = pool.stats().current[static_cast<int>(MemCategory::kActivations)];
    Var loss = net.loss(tape, in, mode);
    const int64_t after = pool.stats().current[static_cast<int>(MemCategory::kActivations)];
    tape.backward(loss);
    return after - before;
}

TEST(Checkpoint, RegionKeepsOnlyItsOutput) {
    // Per ResMlp the plain tape keeps layernorm's y (N, C) and stats (2, N) f32, fc1 and gelu
    // outputs (N, 2C), fc2's output (N, C) and the sum (N, C); the region keeps r2's sum only.
    const int64_t a = rounded(kN * kC * 4), s = rounded(2 * kN * 4), f = rounded(kN * 2 * kC * 4);
    const int64_t per_mlp = a + s + 2 * f + a + a;
    EXPECT_EQ(stored_after_forward(Mode::kPlain) - stored_after_forward(Mode::kRegion),
              2 * per_mlp - a);
    EXPECT_EQ(stored_after_forward(Mode::kNested), stored_after_forward(Mode::kRegion));
}

TEST(Checkpoint, NotRecordingRunsTheFunctionPlainly) {
    MemoryPool pool;
    Tape tape(pool);
    Net net;
    ParamArena arena(pool, net.parameters(), ArenaOptions{});
    arena.init_weights(3);
    Var in = make_input(pool, DType::kF32);
    tape.set_recording(false);
    float plain = net.loss(tape, in, Mode::kPlain)->value.data<float>()[0];
    float region = net.loss(tape, in, Mode::kRegion)->value.data<float>()[0];
    EXPECT_EQ(tape.size(), 0u);
    EXPECT_EQ(region, plain);
    EXPECT_FALSE(tape.recording());
}

TEST(Checkpoint, RejectsARepeatedInput) {
    MemoryPool pool;
    Tape tape(pool);
    Var x = make_var(Tensor::zeros(pool, {2, 2}, DType::kF32, MemCategory::kActivations), true);
    auto fn = [](Tape& t, const std::vector<Var>& v) { return ops::add(t, v[0], v[1]); };
    EXPECT_THROW(checkpoint(tape, {x, x}, fn), Error);
}

}  // namespace
}  // namespace zt
