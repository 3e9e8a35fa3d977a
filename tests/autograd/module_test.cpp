// Module and ParamArena: hook order around forward and backward of nested modules, dotted
// parameter names after nesting, the flat arena layout (registration order, padding to pad_to),
// and initial weights that depend only on (seed, name, element index) with the requested std.
#include "autograd/module.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "autograd/param_arena.h"
#include "tensor/threads.h"

namespace zt {
namespace {

using Events = std::vector<std::string>;

// x: (N, 4) -> (N, 3)
class Leaf : public Module {
public:
    Leaf() : weight(register_parameter("weight", {3, 4}, ParamInit::normal(0.5f), true)) {}
    Var forward(Tape& t, const Var& x) {
        return call(t, [&] { return ops::linear(t, x, weight.var, nullptr); });
    }
    Parameter& weight;
};

// Registers a child before its own parameter.
class Middle : public Module {
public:
    Middle()
        : inner(register_module<Leaf>("inner")),
          scale(register_parameter("scale", {3}, ParamInit::ones(), false)) {}
    Leaf& inner;
    Parameter& scale;
};

class Outer : public Module {
public:
    Outer()
        : pos(register_parameter("pos", {5, 2}, ParamInit::normal(0.02f), true)),
          b0(register_module<Middle>("blocks.0")),
          b1(register_module<Middle>("blocks.1")),
          head(register_module<Leaf>("head")) {}
    Parameter& pos;
    Middle& b0;
    Middle& b1;
    Leaf& head;
};

// Two sibling children on the same input, then parent-level ops: x: (N, 4) -> gelu(a(x) + b(x)).
class Parent : public Module {
public:
    Parent() : a(register_module<Leaf>("a")), b(register_module<Leaf>("b")) {}
    Var forward(Tape& t, const Var& x) {
        return call(t, [&] {
            Var ya = a.forward(t, x);
            Var yb = b.forward(t, x);
            return ops::gelu(t, ops::add(t, ya, yb));
        });
    }
    Leaf& a;
    Leaf& b;
};

const char* point_name(HookPoint p) {
    switch (p) {
        case HookPoint::kPreForward: return "pre_forward";
        case HookPoint::kPostForward: return "post_forward";
        case HookPoint::kPreBackward: return "pre_backward";
        case HookPoint::kPostBackward: return "post_backward";
    }
    return "?";
}

void record_all(Module& m, const std::string& label, Events& ev) {
    for (HookPoint p : {HookPoint::kPreForward, HookPoint::kPostForward, HookPoint::kPreBackward,
                        HookPoint::kPostBackward})
        m.add_hook(p, [&ev, label, p](Module&) { ev.push_back(label + " " + point_name(p)); });
}

// Sum of |g| over a parameter's gradient.
double grad_l1(const Parameter& p) {
    double s = 0;
    for (float g : p.grad.to_vector()) s += std::abs(g);
    return s;
}

struct Fixture {
    MemoryPool pool;
    Tape tape{pool};
    Parent model;
    std::unique_ptr<ParamArena> arena;
    Var x;
    Fixture() {
        arena = std::make_unique<ParamArena>(pool, model.parameters(), ArenaOptions{});
        arena->init_weights(1);
        x = make_var(Tensor::empty(pool, {3, 4}, DType::kF32, MemCategory::kActivations), false);
        x->value.fill(0.5f);
    }
    Var loss() {
        Var y = model.forward(tape, x);  // (3, 3)
        return ops::cross_entropy(tape, y, std::vector<int32_t>{0, 2, 1});
    }
};

TEST(ModuleHooks, NestedOrder) {
    Fixture f;
    Events ev;
    record_all(f.model, "parent", ev);
    record_all(f.model.a, "a", ev);
    record_all(f.model.b, "b", ev);
    Var l = f.loss();
    EXPECT_EQ(ev, (Events{"parent pre_forward", "a pre_forward", "a post_forward", "b pre_forward",
                          "b post_forward", "parent post_forward"}));
    ev.clear();
    f.tape.backward(l);
    // Backward visits the children in reverse; a parent's pre-backward precedes its children's,
    // its post-backward follows theirs.
    EXPECT_EQ(ev, (Events{"parent pre_backward", "b pre_backward", "b post_backward",
                          "a pre_backward", "a post_backward", "parent post_backward"}));
}

TEST(ModuleHooks, BackwardHooksBracketTheModulesOps) {
    // Pre-backward runs before any of the module's gradient is produced (ZeRO-3 gathers there),
    // post-backward after all of it (gradients are reduced there).
    Fixture f;
    Events ev;
    auto probe = [&](Leaf& m, const std::string& label) {
        m.add_hook(HookPoint::kPreBackward, [&ev, label](Module& mod) {
            auto& leaf = static_cast<Leaf&>(mod);
            ev.push_back(label + (grad_l1(leaf.weight) == 0 ? " pre clean" : " pre dirty"));
        });
        m.add_hook(HookPoint::kPostBackward, [&ev, label](Module& mod) {
            auto& leaf = static_cast<Leaf&>(mod);
            ev.push_back(label + (grad_l1(leaf.weight) > 0 ? " post done" : " post missing"));
        });
    };
    probe(f.model.a, "a");
    probe(f.model.b, "b");
    f.model.add_hook(HookPoint::kPreBackward, [&](Module&) {
        ev.push_back(grad_l1(f.model.a.weight) + grad_l1(f.model.b.weight) == 0 ? "parent clean"
                                                                                : "parent dirty");
    });
    Var l = f.loss();
    f.tape.backward(l);
    EXPECT_EQ(ev, (Events{"parent clean", "b pre clean", "b post done", "a pre clean",
                          "a post done"}));
}

TEST(ModuleHooks, SeveralHooksRunInOrderAddedAndPerCall) {
    // A module called twice (shared weights) is bracketed twice on the tape.
    Fixture f;
    Events ev;
    f.model.a.add_hook(HookPoint::kPreForward, [&](Module&) { ev.push_back("first"); });
    f.model.a.add_hook(HookPoint::kPreForward, [&](Module&) { ev.push_back("second"); });
    f.model.a.add_hook(HookPoint::kPreBackward, [&](Module&) { ev.push_back("pre_backward"); });
    f.model.a.add_hook(HookPoint::kPostBackward, [&](Module&) { ev.push_back("post_backward"); });
    Var y1 = f.model.a.forward(f.tape, f.x);
    Var y2 = f.model.a.forward(f.tape, f.x);
    Var l = ops::cross_entropy(f.tape, ops::add(f.tape, y1, y2), std::vector<int32_t>{0, 1, 2});
    EXPECT_EQ(ev, (Events{"first", "second", "first", "second"}));
    ev.clear();
    f.tape.backward(l);
    EXPECT_EQ(ev, (Events{"pre_backward", "post_backward", "pre_backward", "post_backward"}));
}

TEST(ModuleHooks, NoBackwardMarkersWhenNotRecording) {
    Fixture f;
    Events ev;
    record_all(f.model, "parent", ev);
    f.tape.set_recording(false);
    Var l = f.loss();
    EXPECT_EQ(f.tape.size(), 0u);
    EXPECT_EQ(ev, (Events{"parent pre_forward", "parent post_forward"}));
}

TEST(ModuleNames, DottedPathsAfterNesting) {
    // Children are registered inside their parents' constructors, before the parent itself has a
    // name, so names are fixed up on adoption, down through every level.
    Outer m;
    EXPECT_EQ(m.name(), "");
    EXPECT_EQ(m.b0.name(), "blocks.0");
    EXPECT_EQ(m.b1.inner.name(), "blocks.1.inner");
    EXPECT_EQ(m.head.name(), "head");
    // PyTorch's named_parameters order: a module's own parameters, then its children's in order.
    std::vector<std::string> names;
    for (Parameter* p : m.parameters()) names.push_back(p->name);
    EXPECT_EQ(names, (std::vector<std::string>{"pos", "blocks.0.scale", "blocks.0.inner.weight",
                                               "blocks.1.scale", "blocks.1.inner.weight",
                                               "head.weight"}));
    ASSERT_EQ(m.children().size(), 3u);
    EXPECT_EQ(m.children()[1], &m.b1);
}

// Parameters for arena tests: 15 + 7 + 3 = 25 elements.
class Holder : public Module {
public:
    explicit Holder(bool extra_first = false, Shape a_shape = {3, 5}) {
        if (extra_first) register_parameter("extra", {11}, ParamInit::normal(1.0f), false);
        register_parameter("a", a_shape, ParamInit::normal(1.0f), true);
        register_parameter("b", {7}, ParamInit::ones(), false);
        register_parameter("c", {3}, ParamInit::normal(0.5f), false);
    }
    Parameter& add(const std::string& name, const Shape& shape, ParamInit init) {
        return register_parameter(name, shape, init, shape.size() == 2);
    }
};

TEST(ParamArena, ContiguousInRegistrationOrderPadded) {
    for (int64_t pad : {1, 4, 5, 25}) {
        SCOPED_TRACE("pad_to " + std::to_string(pad));
        MemoryPool pool;
        Holder h;
        ParamArena arena(pool, h.parameters(), ArenaOptions{.pad_to = pad});
        arena.init_weights(3);
        EXPECT_EQ(arena.numel(), 25);
        EXPECT_EQ(arena.padded_numel(), (25 + pad - 1) / pad * pad);
        EXPECT_EQ(arena.master().numel(), arena.padded_numel());
        EXPECT_EQ(arena.grads().numel(), arena.padded_numel());
        int64_t offset = 0;
        for (Parameter* p : arena.params()) {
            EXPECT_EQ(p->offset, offset) << p->name;
            EXPECT_EQ(p->master.data<float>(), arena.master().data<float>() + offset) << p->name;
            EXPECT_EQ(p->grad.data<float>(), arena.grads().data<float>() + offset) << p->name;
            // f32: ops see the master weights themselves, and their gradient is the arena's.
            EXPECT_EQ(p->var->value.raw(), p->master.raw()) << p->name;
            EXPECT_EQ(p->var->grad.raw(), p->grad.raw()) << p->name;
            EXPECT_TRUE(p->var->requires_grad && p->var->is_param) << p->name;
            offset += p->numel();
        }
        std::vector<float> m = arena.master().to_vector();
        for (int64_t i = 25; i < arena.padded_numel(); ++i) EXPECT_EQ(m[i], 0.0f) << "padding " << i;
    }
}

TEST(ParamArena, Bf16ComputeCopy) {
    MemoryPool pool;
    Holder h;
    ParamArena arena(pool, h.parameters(),
                     ArenaOptions{.compute_dtype = DType::kBF16, .pad_to = 4});
    arena.init_weights(3);
    EXPECT_EQ(arena.compute().dtype(), DType::kBF16);
    EXPECT_EQ(arena.compute().numel(), 28);
    std::vector<float> m = arena.master().to_vector(), c = arena.compute().to_vector();
    for (size_t i = 0; i < m.size(); ++i) EXPECT_EQ(c[i], bf16_to_f32(f32_to_bf16(m[i]))) << i;
    Parameter* a = arena.find("a");
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(a->var->value.dtype(), DType::kBF16);
    EXPECT_EQ(a->var->value.to_vector()[2], c[a->offset + 2]);
    // The compute copy follows the master weights only on sync_compute.
    a->master.data<float>()[2] = 3.0f;
    EXPECT_NE(a->var->value.to_vector()[2], 3.0f);
    arena.sync_compute();
    EXPECT_EQ(a->var->value.to_vector()[2], 3.0f);
}

TEST(ParamArena, ZeroGrads) {
    MemoryPool pool;
    Holder h;
    ParamArena arena(pool, h.parameters(), ArenaOptions{.pad_to = 4});
    arena.grads().fill(2.0f);
    arena.zero_grads();
    for (float g : arena.grads().to_vector()) EXPECT_EQ(g, 0.0f);
}

struct HolderKind {
    bool extra_first = false;
    Shape a_shape = {3, 5};
};

// The initial values of one parameter of a fresh Holder. The Holder is built here, after the
// pool: its Parameters keep views of the arena, which must die before the pool does.
std::vector<float> init_values(HolderKind kind, int64_t pad, uint64_t seed,
                               const std::string& name) {
    MemoryPool pool;
    Holder h(kind.extra_first, kind.a_shape);
    ParamArena arena(pool, h.parameters(), ArenaOptions{.pad_to = pad});
    arena.init_weights(seed);
    Parameter* p = arena.find(name);
    EXPECT_NE(p, nullptr) << name;
    return p ? p->master.to_vector() : std::vector<float>{};
}

TEST(ParamArena, InitDependsOnlyOnSeedNameAndIndex) {
    const HolderKind plain, extra{.extra_first = true}, reshaped{.a_shape = {5, 3}};
    for (const char* name : {"a", "b", "c"}) {
        SCOPED_TRACE(name);
        std::vector<float> ref = init_values(plain, 1, 42, name);
        // Other padding, another parameter registered before it (so another offset), another
        // thread count: the same values, bit for bit.
        EXPECT_EQ(init_values(plain, 4, 42, name), ref);
        EXPECT_EQ(init_values(extra, 1, 42, name), ref);
        EXPECT_EQ(init_values(extra, 7, 42, name), ref);
        set_num_threads(2);
        EXPECT_EQ(init_values(extra, 3, 42, name), ref);
        set_num_threads(1);
        // The shape does not enter either: element i is element i.
        EXPECT_EQ(init_values(reshaped, 1, 42, name), ref);
    }
    // The seed and the name do.
    EXPECT_NE(init_values(plain, 1, 43, "a"), init_values(plain, 1, 42, "a"));
    std::vector<float> a = init_values(plain, 1, 42, "a"), c = init_values(plain, 1, 42, "c");
    EXPECT_NE(a[0], c[0] * 2.0f);  // c has std 0.5 and a std 1: not the same stream rescaled
    for (float v : init_values(plain, 1, 42, "b")) EXPECT_EQ(v, 1.0f);
}

TEST(ParamArena, NormalInitHasRequestedStd) {
    // n = 120000 draws: the sample std has standard error std / sqrt(2n) (0.2% of std) and the
    // mean std / sqrt(n); 5 standard errors keep a false failure below 1e-6 while a std off by
    // 2% (or a uniform instead of a normal, checked through the 4th moment) fails.
    MemoryPool pool;
    Holder h;
    const float kStd = 0.02f;
    h.add("big", {300, 400}, ParamInit::normal(kStd));
    h.add("zero", {10}, ParamInit::zeros());
    ParamArena arena(pool, h.parameters(), ArenaOptions{});
    arena.init_weights(11);
    std::vector<float> w = arena.find("big")->master.to_vector();
    const double n = static_cast<double>(w.size());
    double s1 = 0, s2 = 0, s4 = 0;
    for (float v : w) s1 += v;
    const double mean = s1 / n;
    for (float v : w) {
        const double d = v - mean;
        s2 += d * d;
        s4 += d * d * d * d;
    }
    const double var = s2 / (n - 1), sd = std::sqrt(var);
    EXPECT_NEAR(mean, 0.0, 5 * kStd / std::sqrt(n));
    EXPECT_NEAR(sd, kStd, 5 * kStd / std::sqrt(2 * n));
    // Kurtosis of a normal is 3 (standard error sqrt(24 / n) = 0.014); a uniform's is 1.8.
    EXPECT_NEAR(s4 / n / (var * var), 3.0, 5 * std::sqrt(24 / n));
    for (float v : arena.find("zero")->master.to_vector()) EXPECT_EQ(v, 0.0f);
}

// Every part of every split is covered by its runs exactly once, each run where
// split_global_index puts its elements one by one, and the parts together fill the whole tensor.
TEST(ParamSplitRuns, RunsAreWhereTheElementsGoOneByOne) {
    struct Case {
        Shape part;
        int dim;
        int64_t parts, blocks;
    };
    const Case cases[] = {
        {{6, 4}, 0, 2, 1},     // Linear row split (c_fc)
        {{4, 3}, 1, 2, 1},     // column split (c_proj)
        {{6, 5}, 0, 2, 3},     // c_attn's q, k, v blocks cut in two
        {{2, 3, 4}, 1, 4, 1},  // a middle dimension
        {{3, 2, 5}, 1, 2, 2},  // a middle dimension in blocks
        {{7}, 0, 3, 1},        // a bias
        {{5, 3}, 0, 1, 1},     // not split
    };
    for (const Case& c : cases) {
        ParamSplit split{c.dim, c.parts, 0, c.blocks};
        const int64_t numel = shape_numel(c.part);
        std::vector<int> hits(static_cast<size_t>(numel * c.parts), 0);
        for (int64_t part = 0; part < c.parts; ++part) {
            split.part = part;
            std::vector<int> seen(static_cast<size_t>(numel), 0);
            for_each_split_run(c.part, split, [&](int64_t local, int64_t global, int64_t count) {
                ASSERT_GT(count, 0);
                for (int64_t j = 0; j < count; ++j) {
                    EXPECT_EQ(global + j, split_global_index(c.part, split, local + j))
                        << "part " << part << " element " << local + j;
                    ++seen[static_cast<size_t>(local + j)];
                    ++hits[static_cast<size_t>(global + j)];
                }
            });
            for (int64_t i = 0; i < numel; ++i) EXPECT_EQ(seen[static_cast<size_t>(i)], 1);
        }
        for (int64_t g = 0; g < numel * c.parts; ++g) EXPECT_EQ(hits[static_cast<size_t>(g)], 1);
    }
}

}  // namespace
}  // namespace zt
