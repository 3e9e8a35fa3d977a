// DLRM (models/dlrm/): the reference's parameter names and shapes, its initialization, the
// parameter count against the formula, gradients against finite differences, evaluation outputs,
// and the config's forms and errors.
#include "models/dlrm/dlrm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "autograd/param_arena.h"
#include "models/dlrm/dlrm_family.h"
#include "models/registry.h"
#include "util/random.h"

namespace zt {
namespace {

DlrmOptions tiny() {
    DlrmOptions o;
    o.dense_features = 5;
    o.tables = {{7, 4, ops::BagPooling::kSum},
                {11, 4, ops::BagPooling::kMean},
                {3, 4, ops::BagPooling::kSum}};
    o.bottom_mlp = {6, 4};
    o.top_mlp = {5, 1};
    return o;
}

TEST(Dlrm, ParameterNamesAndShapesAsTheReference) {
    const DlrmOptions o = tiny();
    Dlrm m(o);
    std::map<std::string, Shape> got;
    for (Parameter* p : m.parameters()) got[p->name] = p->shape;
    // Top input: bottom output 4 + pairs among 4 vectors (bottom + 3 tables) = 4 + 6.
    const std::map<std::string, Shape> want = {
        {"emb_l.0.weight", {7, 4}}, {"emb_l.1.weight", {11, 4}}, {"emb_l.2.weight", {3, 4}},
        {"bot_l.0.weight", {6, 5}}, {"bot_l.0.bias", {6}},       {"bot_l.2.weight", {4, 6}},
        {"bot_l.2.bias", {4}},      {"top_l.0.weight", {5, 10}}, {"top_l.0.bias", {5}},
        {"top_l.2.weight", {1, 5}}, {"top_l.2.bias", {1}}};
    EXPECT_EQ(got, want);
    int64_t n = 0;
    for (const auto& [name, shape] : want) n += shape_numel(shape);
    EXPECT_EQ(dlrm_param_count(o), n);
    EXPECT_EQ(dlrm_interaction_pairs(o), 6);
    DlrmOptions self = o;
    self.self_interaction = true;
    EXPECT_EQ(dlrm_interaction_pairs(self), 10);
}

TEST(Dlrm, InitAsTheReference) {
    // Tables U(-1/sqrt(rows), 1/sqrt(rows)); Linear weights N(0, sqrt(2 / (in + out))), biases
    // N(0, sqrt(1 / out)). A wide layer checks the std within sampling error.
    DlrmOptions o;
    o.dense_features = 300;
    o.tables = {{400, 100, ops::BagPooling::kSum}};
    o.bottom_mlp = {200, 100};
    o.top_mlp = {1};
    MemoryPool pool;
    Dlrm m(o);
    ParamArena arena(pool, m.parameters(), ArenaOptions{});
    arena.init_weights(42);
    const std::vector<float> t = m.tables[0]->weight.master.to_vector();
    const float bound = 1.0f / std::sqrt(400.0f);
    float lo = 1, hi = -1;
    for (float v : t) {
        lo = std::min(lo, v);
        hi = std::max(hi, v);
    }
    EXPECT_GE(lo, -bound);
    EXPECT_LE(hi, bound);
    EXPECT_LT(lo, -0.95f * bound);  // spans the interval
    EXPECT_GT(hi, 0.95f * bound);
    auto std_of = [](const std::vector<float>& v) {
        double s = 0, s2 = 0;
        for (float x : v) {
            s += x;
            s2 += double{x} * x;
        }
        const double n = static_cast<double>(v.size());
        return std::sqrt(s2 / n - (s / n) * (s / n));
    };
    const double w_std = std_of(m.bottom[0]->weight.master.to_vector());  // 60000 samples
    EXPECT_NEAR(w_std, std::sqrt(2.0 / 500.0), 0.01 * std::sqrt(2.0 / 500.0) * 3);
    const double b_std = std_of(m.bottom[0]->bias->master.to_vector());  // 200 samples
    EXPECT_NEAR(b_std, std::sqrt(1.0 / 200.0), 0.2 * std::sqrt(1.0 / 200.0));
}

// A model, its arena and one batch of click data with multi-hot bags, an empty bag and
// per-sample weights on the first table.
struct DlrmRun {
    MemoryPool pool;
    Tape tape{pool};
    DlrmOptions o;
    Dlrm model;
    std::unique_ptr<ParamArena> arena;
    int64_t B = 4;
    std::vector<float> dense, labels;
    std::vector<std::vector<int64_t>> ids;
    std::vector<std::vector<int64_t>> offsets;
    std::vector<std::vector<float>> weights;
    ClickBatch click;

    explicit DlrmRun(const DlrmOptions& opts) : o(opts), model(opts) {
        arena = std::make_unique<ParamArena>(pool, model.parameters(), ArenaOptions{});
        arena->init_weights(42);
        Rng rng(3);
        for (int64_t i = 0; i < B * o.dense_features; ++i)
            dense.push_back(static_cast<float>(rng.uniform() * 2));
        labels = {1, 0, 0, 1};
        const size_t K = o.tables.size();
        ids.resize(K);
        offsets.resize(K);
        weights.resize(K);
        for (size_t k = 0; k < K; ++k) {
            offsets[k].push_back(0);
            for (int64_t b = 0; b < B; ++b) {
                const int64_t n = (b == 2 && k == 1) ? 0 : 1 + (b + static_cast<int64_t>(k)) % 3;
                for (int64_t j = 0; j < n; ++j)
                    ids[k].push_back(static_cast<int64_t>(rng.below(o.tables[k].rows)));
                offsets[k].push_back(static_cast<int64_t>(ids[k].size()));
            }
        }
        for (size_t j = 0; j < ids[0].size(); ++j)
            weights[0].push_back(0.5f + 0.25f * static_cast<float>(j % 3));
        click.B = B;
        click.F = o.dense_features;
        click.dense = dense;
        click.labels = labels;
        for (size_t k = 0; k < K; ++k) {
            click.ids.emplace_back(ids[k]);
            click.offsets.emplace_back(offsets[k]);
            click.weights.emplace_back(weights[k]);
        }
    }
    Batch batch() const {
        Batch b;
        b.B = B;
        b.click = &click;
        return b;
    }
    Var loss() { return model.loss(tape, batch()); }
    double eval() {
        tape.set_recording(false);
        const double l = loss()->value.to_vector()[0];
        tape.set_recording(true);
        return l;
    }
    // Larger weights than the init, so that every path carries gradient (ReLUs open).
    void randomize(float s) {
        Rng rng(9);
        for (Parameter* p : arena->params()) {
            float* w = p->master.data<float>();
            for (int64_t i = 0; i < p->numel(); ++i)
                w[i] = s * static_cast<float>(2.0 * rng.uniform() - 1.0);
        }
        arena->sync_compute();
    }
};

TEST(Dlrm, GradientsMatchFiniteDifferences) {
    // Every parameter, a few elements each (table rows that the batch uses). The f32 loss (~0.7)
    // rounds to ~6e-8, so eps 3e-3 gives a noise floor near 2e-5. A ReLU kink crossed within
    // +-eps bends the difference quotient: at eps 1e-2 one probe (bot_l.2.weight[0]) was off by
    // 3%; the kink probability shrinks with eps.
    for (bool self : {false, true}) {
        DlrmOptions o = tiny();
        o.self_interaction = self;
        DlrmRun run(o);
        run.randomize(0.5f);
        Var l = run.loss();
        run.tape.backward(l);
        const float eps = 3e-3f;
        int checked = 0;
        for (Parameter* p : run.arena->params()) {
            std::vector<int64_t> probes;
            if (p->name.rfind("emb_l.", 0) == 0) {
                const size_t k = static_cast<size_t>(p->name[6] - '0');
                const int64_t D = p->shape[1];
                probes = {run.ids[k][0] * D, run.ids[k].back() * D + D - 1};
            } else {
                probes = {0, p->numel() - 1};
            }
            for (int64_t idx : probes) {
                const double g = p->grad.to_vector()[static_cast<size_t>(idx)];
                float& w = p->master.data<float>()[idx];
                const float w0 = w;
                w = w0 + eps;
                run.arena->sync_compute();
                const double lp = run.eval();
                w = w0 - eps;
                run.arena->sync_compute();
                const double lm = run.eval();
                w = w0;
                run.arena->sync_compute();
                const double fd = (lp - lm) / (2.0 * eps);
                EXPECT_NEAR(g, fd, 2e-4 + 2e-3 * std::abs(fd))
                    << p->name << "[" << idx << "] self " << self;
                ++checked;
            }
        }
        EXPECT_EQ(checked, 22);
    }
}

TEST(Dlrm, EvalOutputsAreSigmoidOfLogits) {
    DlrmRun run(tiny());
    std::vector<float> out, labels;
    run.tape.set_recording(false);
    Var l = run.model.eval(run.tape, run.batch(), out, labels);
    const std::vector<float> z = run.model.logits(run.tape, run.click)->value.to_vector();
    ASSERT_EQ(out.size(), 4u);
    EXPECT_EQ(labels, run.labels);
    double bce = 0;
    for (size_t i = 0; i < 4; ++i) {
        EXPECT_NEAR(out[i], 1.0 / (1.0 + std::exp(-double{z[i]})), 1e-7);
        const double y = run.labels[i], zi = z[i];
        bce += std::max(zi, 0.0) - zi * y + std::log1p(std::exp(-std::abs(zi)));
    }
    EXPECT_NEAR(l->value.to_vector()[0], bce / 4, 1e-6);
}

// parse_model_family on {"model": ..., "data": ...}; errors joined.
struct Parsed {
    std::shared_ptr<const ModelFamily> family;
    std::vector<std::string> errors, warnings;
};
Parsed parse(const nlohmann::json& model, const nlohmann::json& data = nlohmann::json::object(),
             const std::string& policy = "none") {
    Parsed p;
    const nlohmann::json root = {{"model", model}, {"data", data}};
    config_detail::Section s(root, "", p.warnings, p.errors);
    p.family = parse_model_family(s, FamilyContext{policy, 1});
    return p;
}

std::string joined(const std::vector<std::string>& v) {
    std::string s;
    for (const std::string& x : v) s += x + "\n";
    return s;
}

TEST(DlrmConfig, TablesListOrRowsWithOneDim) {
    const Parsed a = parse(
        {{"type", "dlrm"},
         {"dense_features", 13},
         {"tables", {{{"rows", 100}, {"dim", 8}}, {{"rows", 50}, {"dim", 8}, {"pooling", "mean"}}}},
         {"bottom_mlp", {16, 8}},
         {"top_mlp", {4}}});
    ASSERT_TRUE(a.family) << joined(a.errors);
    const DlrmOptions& m = as_dlrm(*a.family).options();
    ASSERT_EQ(m.tables.size(), 2u);
    EXPECT_EQ(m.tables[1].rows, 50);
    EXPECT_EQ(m.tables[1].pooling, ops::BagPooling::kMean);
    EXPECT_EQ(m.top_mlp, (std::vector<int64_t>{4, 1}));  // the logit layer appended
    const Parsed b = parse({{"type", "dlrm"},
                            {"table_rows", {100, 50}},
                            {"embedding_dim", 8},
                            {"bottom_mlp", {16, 8}},
                            {"top_mlp", {4, 1}}});
    ASSERT_TRUE(b.family) << joined(b.errors);
    EXPECT_EQ(as_dlrm(*b.family).options().tables.size(), 2u);
    EXPECT_EQ(as_dlrm(*b.family).options().top_mlp, (std::vector<int64_t>{4, 1}));
    EXPECT_EQ(b.family->describe_json()["tables"][1]["rows"], 50);
    EXPECT_TRUE(b.warnings.empty()) << joined(b.warnings);
}

TEST(DlrmConfig, ErrorsNameTheKey) {
    const nlohmann::json ok = {{"type", "dlrm"},
                               {"table_rows", {100}},
                               {"embedding_dim", 8},
                               {"bottom_mlp", {8}},
                               {"top_mlp", {1}}};
    struct Case {
        nlohmann::json model, data;
        std::string policy, expect;
    };
    auto with = [&](const std::string& k, const nlohmann::json& v) {
        nlohmann::json m = ok;
        m[k] = v;
        return m;
    };
    nlohmann::json no_tables = ok;
    no_tables.erase("table_rows");
    const std::vector<Case> cases = {
        {with("tables", {{{"rows", 10}, {"dim", 8}}}), {}, "none", "not both"},
        {no_tables, {}, "none", "got neither"},
        {with("bottom_mlp", {16}), {}, "none", "model.bottom_mlp: the dot interaction needs"},
        {with("interaction", "cat"), {}, "none", "model.interaction"},
        {with("table_rows", {0}), {}, "none", "model.table_rows[0]"},
        {with("table_rows", {int64_t{1} << 32}), {}, "none", "2^31 - 1"},
        {with("tables", nlohmann::json()), {{"type", "ctr"}}, "none", "data.path"},
        {ok, {{"type", "synthetic"}, {"path", "x"}}, "none", "data.path: not used"},
        {ok, {{"type", "ctr"}, {"path", "x"}, {"records", 5}}, "none", "data.records: not used"},
        {ok, {}, "every", "activation_checkpointing.policy"},
    };
    for (const Case& c : cases) {
        const Parsed p = parse(c.model, c.data, c.policy);
        EXPECT_FALSE(p.family) << c.model.dump();
        EXPECT_NE(joined(p.errors).find(c.expect), std::string::npos)
            << "expected '" << c.expect << "' in:\n"
            << joined(p.errors);
    }
}

TEST(DlrmFamily, FlopsPerSampleFromTheFormula) {
    // Note [DLRM FLOPs]: 3 x (sum of 2 in out + out over Linears + 2 D P).
    const Parsed p = parse({{"type", "dlrm"},
                            {"dense_features", 13},
                            {"table_rows", {10, 20, 30}},
                            {"embedding_dim", 16},
                            {"bottom_mlp", {64, 16}},
                            {"top_mlp", {32}}});
    ASSERT_TRUE(p.family) << joined(p.errors);
    const double P = 6;  // 4 vectors
    const double fwd = (2.0 * 13 * 64 + 64) + (2.0 * 64 * 16 + 16) + (2.0 * (16 + P) * 32 + 32) +
                       (2.0 * 32 * 1 + 1) + 2.0 * 16 * P;
    EXPECT_DOUBLE_EQ(p.family->flops_per_sample(), 3 * fwd);
    EXPECT_EQ(p.family->param_count(),
              (10 + 20 + 30) * 16 + (13 * 64 + 64) + (64 * 16 + 16) + (22 * 32 + 32) + (32 + 1));
}

// The estimator's list of the arena's parameters (ModelFamily::param_numels) is the built
// model's, in order: replicated tables (a sharded one is not in the arena), then the MLPs.
TEST(DlrmFamily, ParamNumelsAreTheArenasInOrder) {
    const Parsed p = parse({{"type", "dlrm"},
                            {"dense_features", 13},
                            {"table_rows", {10, 20, 30}},
                            {"embedding_dim", 16},
                            {"bottom_mlp", {64, 16}},
                            {"top_mlp", {32}}});
    ASSERT_TRUE(p.family) << joined(p.errors);
    const std::unique_ptr<Model> m = p.family->build();
    std::vector<int64_t> built;
    for (const Parameter* q : m->parameters()) built.push_back(q->numel());
    EXPECT_EQ(p.family->param_numels(1, PipeStage{}), built);
    EXPECT_EQ(built.size(), 3u + 4u + 4u);  // the top MLP ends in the 1-wide output Linear
}

}  // namespace
}  // namespace zt
