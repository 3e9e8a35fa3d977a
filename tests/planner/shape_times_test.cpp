// Kernel times by shape (Note [Times by shape], src/planner/shape_times.cpp): the keys, the sums
// the cost model takes, what gets measured, and the DLRM family's shapes against its FLOPs.
#include "planner/shape_times.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <thread>

#include "comm/local/local_comm.h"
#include "models/dlrm/dlrm_family.h"
#include "models/gpt/gpt_family.h"
#include "nn/layers.h"
#include "nn/model.h"
#include "planner/calibrate.h"
#include "planner/cost_model.h"
#include "planner/profile.h"
#include "planner/sparse_times.h"
#include "planner_test_util.h"
#include "tensor/threads.h"

namespace zt {
namespace {

using testing::round_profile;

DlrmOptions small_dlrm() {
    DlrmOptions o;
    o.dense_features = 13;
    for (int64_t rows : {300, 40, 7}) {
        DlrmTable t;
        t.rows = rows;
        t.dim = 8;
        o.tables.push_back(t);
    }
    o.bottom_mlp = {24, 8};
    o.top_mlp = {16, 1};
    return o;
}

PlanBase dlrm_base(int64_t global_batch) {
    PlanBase b;
    DlrmDataOptions d;
    d.hotness = 2;
    b.spec.model = std::make_shared<DlrmFamily>(small_dlrm(), d);
    b.spec.optimizer = "AdamW";
    b.spec.state.optimizer_states = 2;
    b.global_batch = global_batch;
    b.cores = 4;
    b.threads = 1;
    b.param_tensors = 8;  // 4 Linear weights and biases (the tables are counted apart)
    return b;
}

// The products are the MLPs' and their FLOPs are the model's less the bias adds and the
// interaction (Note [DLRM FLOPs]): 3 x (2 m n k) per product over forward and backward.
TEST(ShapeTimes, DlrmProductsAreItsMlpsAndCarryItsFlops) {
    const PlanBase base = dlrm_base(64);
    const DlrmFamily& m = static_cast<const DlrmFamily&>(*base.spec.model);
    const int64_t B = 32;
    const std::vector<GemmShape> g = m.gemm_shapes(B, 1);
    ASSERT_EQ(g.size(), 4u);  // bottom 13-24-8, top (8 + the pairs' dots)-16-1
    EXPECT_EQ(g[0].m, B);
    EXPECT_EQ(g[0].k, 13);
    EXPECT_EQ(g[0].n, 24);
    EXPECT_EQ(g[1].k, 24);
    EXPECT_EQ(g[1].n, 8);
    EXPECT_EQ(g[2].k, dlrm_top_input(m.options()));
    EXPECT_EQ(g[3].n, 1);
    double products = 0, biases = 0;
    for (const GemmShape& s : g) {
        products += 6.0 * static_cast<double>(s.m * s.n * s.k);
        biases += 3.0 * static_cast<double>(s.m * s.n);
    }
    const DlrmOptions& o = m.options();
    const double interaction =
        3.0 * B * 2.0 * static_cast<double>(o.tables[0].dim * dlrm_interaction_pairs(o));
    EXPECT_DOUBLE_EQ(products + biases + interaction, m.flops_per_sample() * B);
    EXPECT_DOUBLE_EQ(gemm_shapes_flops(g), products);
    const std::vector<InteractionShape> x = m.interaction_shapes(B);
    ASSERT_EQ(x.size(), 1u);
    EXPECT_EQ(x[0].batch, B);
    EXPECT_EQ(x[0].k, 3);  // the tables
    EXPECT_EQ(x[0].dim, 8);
    EXPECT_DOUBLE_EQ(interaction_shapes_flops(x), interaction);
    const std::vector<LookupShape> l = m.lookup_shapes(B);
    ASSERT_EQ(l.size(), 3u);
    EXPECT_EQ(l[1].rows, 40);
    EXPECT_EQ(l[1].per_bag, 2);  // the data's hotness
    EXPECT_EQ(l[1].bags, B);
    EXPECT_EQ(l[1].dim, 8);
}

// GPT's products (Note [GPT products by shape]) are the Linears and the tied head of the model it
// builds, each at the micro-batch's B T rows; a tensor-parallel rank's are the split widths.
TEST(ShapeTimes, GptProductsAreItsLinearsAndHeadSplitOverTensorParallelRanks) {
    GptOptions o{96, 16, 32, 3, 4};  // vocab 96, seq 16, d_model 32, 3 layers, 4 heads
    o.d_ff = 48;                     // F other than 4 C, so that each width is checked
    const GptFamily gpt(o, GptDataOptions{});
    const int64_t B = 5, N = B * o.seq_len;
    // The built model's products: a Linear (out, in) is 2 N in out each lane, the head 2 N C V.
    const std::unique_ptr<Model> model = gpt.build();
    double built = 0;
    int linears = 0;
    std::vector<const Module*> todo = {model.get()};
    while (!todo.empty()) {
        const Module* m = todo.back();
        todo.pop_back();
        for (const Module* c : m->children()) todo.push_back(c);
        if (const auto* l = dynamic_cast<const Linear*>(m)) {
            built += 6.0 * N * static_cast<double>(l->weight.shape[0] * l->weight.shape[1]);
            ++linears;
        }
        if (const auto* h = dynamic_cast<const TiedHead*>(m))
            built += 6.0 * N * static_cast<double>(h->weight.shape[0] * h->weight.shape[1]);
    }
    ASSERT_EQ(linears, 4 * o.n_layers);
    const std::vector<GemmShape> one = gpt.gemm_shapes(B, 1);
    EXPECT_DOUBLE_EQ(gemm_shapes_flops(one), built);
    for (const GemmShape& g : one) EXPECT_EQ(g.m, N);
    // Two ranks: each product's split side halves (c_attn, c_fc, the head: outputs; the two
    // c_proj: inputs), the rows stay.
    const std::vector<GemmShape> two = gpt.gemm_shapes(B, 2);
    ASSERT_EQ(two.size(), one.size());
    for (size_t i = 0; i < one.size(); ++i) {
        EXPECT_EQ(two[i].m, N);
        EXPECT_EQ(two[i].count, one[i].count);
        EXPECT_EQ(two[i].n * two[i].k * 2, one[i].n * one[i].k) << i;
    }
    EXPECT_EQ(two[1].k * 2, one[1].k);  // attn.c_proj splits its input
    EXPECT_EQ(two[3].k * 2, one[3].k);  // mlp.c_proj too
    EXPECT_EQ(two[4].n * 2, o.vocab_size);
}

// A tensor-parallel rank's products are its own (split) shapes: their times count whole, in
// place of the group's FLOPs over t (the class rate's share).
TEST(ShapeTimes, TensorParallelRanksTakeTheirSplitProductsTimes) {
    const PlanBase base = testing::tiny_gpt_base(8);
    const ModelFamily& m = *base.spec.model;
    MachineProfile prof = round_profile();
    Strategy s;
    s.tp = 2;
    s.micro_batch = 8;
    s.grad_accum = 1;
    const PlanCost before = plan_cost(base, s, &prof);
    measure_plan_shapes(prof, base, {{s}});
    const std::vector<GemmShape> g = m.gemm_shapes(8, 2);
    ASSERT_EQ(prof.shape_s.size(), 3 * g.size());
    for (auto& [key, sec] : prof.shape_s) sec = 1e-5;
    const PlanCost after = plan_cost(base, s, &prof);
    double lanes = 0;
    for (const GemmShape& x : g) lanes += 3.0 * static_cast<double>(x.count);
    const double rate = compute_rates(base, s, prof).gemm;
    // Gone: the group's products (t x one rank's FLOPs) over t at the class rate; come: each
    // lane's 10 us, not divided again.
    const double gone = 2 * gemm_shapes_flops(g) / 2 / rate, come = lanes * 1e-5;
    EXPECT_NEAR(after.time.compute, before.time.compute + come - gone, 1e-12);
}

// Note [Timed rows]: a product over the cap is timed on fewer rows (a multiple of 64, at least
// 256) and its time scaled by the rows' ratio; under it, on its own rows.
TEST(ShapeTimes, LargeProductsAreTimedOnFewerRowsAndScaled) {
    MachineProfile p;
    const GemmShape big{8192, 512, 512, 3};     // 4.3 GFLOP a lane: 1e9 / (2 512 512) -> 1856 rows
    const GemmShape wide{1024, 50304, 768, 1};  // 77 MFLOP a row: the 256-row floor
    const GemmShape small{512, 512, 512, 2};    // 0.27 GFLOP: as it is
    auto lanes = [&](int64_t m, int64_t n, int64_t k, double t) {
        p.shape_s[gemm_time_key(DType::kF32, 1, "NT", m, n, k)] = t;
        p.shape_s[gemm_time_key(DType::kF32, 1, "NN", m, k, n)] = 2 * t;
        p.shape_s[gemm_time_key(DType::kF32, 1, "TN", n, k, m)] = 4 * t;
    };
    lanes(1856, 512, 512, 1e-3);
    lanes(256, 50304, 768, 1e-2);
    lanes(512, 512, 512, 1e-4);
    const std::vector<GemmShape> b = {big}, w = {wide}, s = {small};
    EXPECT_NEAR(*gemm_shapes_seconds(p, DType::kF32, 1, b), 3 * 7e-3 * 8192 / 1856, 1e-12);
    EXPECT_NEAR(*gemm_shapes_seconds(p, DType::kF32, 1, w), 7e-2 * 4, 1e-12);
    EXPECT_NEAR(*gemm_shapes_seconds(p, DType::kF32, 1, s), 2 * 7e-4, 1e-15);
    // Measuring times the capped rows: the three lanes of 1856 x 512 x 512, nothing else.
    MachineProfile fresh;
    EXPECT_EQ(measure_shapes(fresh, DType::kF32, 1, b, {}, {}, 1e-4), 3);
    EXPECT_TRUE(fresh.shape_s.count(gemm_time_key(DType::kF32, 1, "TN", 512, 512, 1856)));
    EXPECT_TRUE(gemm_shapes_seconds(fresh, DType::kF32, 1, b));
}

TEST(ShapeTimes, SumsTheThreeLanesOfEachProductAndEveryLookup) {
    MachineProfile p;
    const std::vector<GemmShape> g = {{32, 24, 13, 2}};
    const std::vector<LookupShape> l = {{32, 2, 300, 8}, {32, 2, 40, 8}};
    EXPECT_FALSE(gemm_shapes_seconds(p, DType::kF32, 1, g));
    p.shape_s[gemm_time_key(DType::kF32, 1, "NT", 32, 24, 13)] = 1e-3;  // Y = X W^T
    p.shape_s[gemm_time_key(DType::kF32, 1, "NN", 32, 13, 24)] = 2e-3;  // dX = dY W
    EXPECT_FALSE(gemm_shapes_seconds(p, DType::kF32, 1, g));            // dW still missing
    p.shape_s[gemm_time_key(DType::kF32, 1, "TN", 24, 13, 32)] = 4e-3;  // dW = dY^T X
    EXPECT_NEAR(*gemm_shapes_seconds(p, DType::kF32, 1, g), 2 * 7e-3, 1e-15);
    EXPECT_FALSE(gemm_shapes_seconds(p, DType::kBF16, 1, g));  // per dtype
    EXPECT_FALSE(gemm_shapes_seconds(p, DType::kF32, 2, g));   // per thread count
    p.shape_s[lookup_time_key(1, l[0])] = 5e-4;
    EXPECT_FALSE(lookup_shapes_seconds(p, 1, l));
    p.shape_s[lookup_time_key(1, l[1])] = 1e-4;
    EXPECT_NEAR(*lookup_shapes_seconds(p, 1, l), 6e-4, 1e-15);
    EXPECT_EQ(gemm_time_key(DType::kBF16, 2, "NT", 512, 64, 13), "gemm bf16 t2 NT 512x64x13");
    EXPECT_EQ(lookup_time_key(2, {512, 1, 2000, 16}), "bag f32 t2 512x1 r2000 d16");
    const std::vector<InteractionShape> x = {{32, 3, 8, false}};
    EXPECT_FALSE(interaction_shapes_seconds(p, 1, x));
    p.shape_s[interaction_time_key(1, x[0])] = 2e-4;
    EXPECT_NEAR(*interaction_shapes_seconds(p, 1, x), 2e-4, 1e-15);
    EXPECT_EQ(interaction_time_key(2, {512, 8, 16, false}), "dot f32 t2 512 k8 d16");
    EXPECT_EQ(interaction_time_key(2, {512, 8, 16, true}), "dot-self f32 t2 512 k8 d16");
}

TEST(ShapeTimes, MeasuresWhatIsMissingOnceAndKeepsTheThreadCount) {
    MachineProfile p;
    const std::vector<GemmShape> g = {{16, 8, 5, 1}, {16, 4, 8, 1}};
    const std::vector<LookupShape> l = {{16, 3, 50, 4}};
    const std::vector<InteractionShape> x = {{16, 3, 4, false}, {16, 3, 4, true}};
    set_num_threads(1);
    // 2 x 3 lanes, 1 lookup, 2 interactions
    EXPECT_EQ(measure_shapes(p, DType::kF32, 2, g, l, x, 1e-4), 9);
    EXPECT_EQ(num_threads(), 1);
    EXPECT_EQ(p.shape_s.size(), 9u);
    for (const auto& [key, s] : p.shape_s) EXPECT_GT(s, 0) << key;
    ASSERT_TRUE(gemm_shapes_seconds(p, DType::kF32, 2, g));
    ASSERT_TRUE(lookup_shapes_seconds(p, 2, l));
    ASSERT_TRUE(interaction_shapes_seconds(p, 2, x));
    EXPECT_EQ(measure_shapes(p, DType::kF32, 2, g, l, x, 1e-4), 0);
    EXPECT_EQ(measure_shapes(p, DType::kF32, 1, g, {}, {}, 1e-4), 6);  // another count: its own
    // Kept through the profile file's JSON; a bad entry is named.
    MachineProfile with_rates = round_profile();
    with_rates.shape_s = p.shape_s;
    EXPECT_EQ(profile_from_json(profile_json(with_rates), "t").shape_s, p.shape_s);
    nlohmann::json bad = profile_json(with_rates);
    bad["shape_s"]["gemm f32 t1 NT 1x1x1"] = -1;
    try {
        profile_from_json(bad, "p.json");
        FAIL() << "a negative time was read";
    } catch (const Error& e) {
        EXPECT_NE(e.message().find("shape_s[\"gemm f32 t1 NT 1x1x1\"]"), std::string::npos)
            << e.message();
    }
}

// Note [Products timed cold]: the class of the bytes between a weight's uses, the key that
// carries it, and products timed in a class kept apart from the warm ones.
TEST(ShapeTimes, ColdClassesHaveTheirOwnKeysAndTimes) {
    constexpr int64_t MiB = int64_t{1} << 20;
    EXPECT_EQ(cold_class_bytes(0), 4 * MiB);  // the least class: a step moves more than its state
    EXPECT_EQ(cold_class_bytes(2.0 * MiB), 4 * MiB);
    EXPECT_EQ(cold_class_bytes(8.0 * MiB - 1), 4 * MiB);  // the nearest class by ratio
    EXPECT_EQ(cold_class_bytes(8.0 * MiB), 16 * MiB);
    EXPECT_EQ(cold_class_bytes(100.0 * MiB), 64 * MiB);
    EXPECT_EQ(cold_class_bytes(128.0 * MiB), 256 * MiB);
    EXPECT_EQ(cold_class_bytes(1e12), 256 * MiB);  // the largest class
    EXPECT_EQ(gemm_time_key(DType::kF32, 2, "TN", 24, 13, 32, 64 * MiB),
              "gemm f32 t2 TN 24x13x32 after 64MiB");
    EXPECT_EQ(gemm_time_key(DType::kF32, 2, "TN", 24, 13, 32, 0), "gemm f32 t2 TN 24x13x32");

    MachineProfile p;
    const std::vector<GemmShape> g = {{16, 8, 5, 1}, {64, 32, 48, 2}};
    EXPECT_EQ(measure_shapes(p, DType::kF32, 1, g, {}, {}, 1e-4, 4 * MiB), 6);
    for (const auto& [key, sec] : p.shape_s) {
        EXPECT_NE(key.find(" after 4MiB"), std::string::npos) << key;
        EXPECT_GT(sec, 0) << key;
    }
    EXPECT_FALSE(gemm_shapes_seconds(p, DType::kF32, 1, g));  // the warm times are not these
    ASSERT_TRUE(gemm_shapes_seconds(p, DType::kF32, 1, g, 4 * MiB));
    EXPECT_FALSE(gemm_shapes_seconds(p, DType::kF32, 1, g, 16 * MiB));  // nor another class's
    EXPECT_EQ(measure_shapes(p, DType::kF32, 1, g, {}, {}, 1e-4, 4 * MiB), 0);
    EXPECT_EQ(measure_shapes(p, DType::kF32, 1, g, {}, {}, 1e-4, 0), 6);  // warm: its own
    for (auto& [key, sec] : p.shape_s) sec = key.find(" after ") == std::string::npos ? 1.0 : 1e-3;
    // Each product's three lanes, times its count.
    EXPECT_NEAR(*gemm_shapes_seconds(p, DType::kF32, 1, g, 4 * MiB), (3 + 3 * 2) * 1e-3, 1e-15);
    EXPECT_NEAR(*gemm_shapes_seconds(p, DType::kF32, 1, g), 3 + 3 * 2, 1e-12);
    // A bf16 product reads its operands from the pool as bf16.
    EXPECT_EQ(measure_shapes(p, DType::kBF16, 1, g, {}, {}, 1e-4, 4 * MiB), 6);
}

// The bytes between uses: the rank's device and host bytes less its tables, times the ranks
// that share the host's caches.
TEST(ShapeTimes, BytesBetweenUsesLeaveOutTheTablesAndCountTheHostsRanks) {
    Estimate e;
    e.device_total = 1000;
    e.device[static_cast<int>(MemCategory::kEmbedding)] = 300;
    e.host_total = 500;
    e.host[static_cast<int>(MemCategory::kEmbedding)] = 100;
    EXPECT_DOUBLE_EQ(step_bytes_between_uses(e, 1), 1100);
    EXPECT_DOUBLE_EQ(step_bytes_between_uses(e, 4), 4400);
}

// A layout whose step moves megabytes has its products timed after that many bytes, and the
// cost model takes those times (not the warm ones); a small model's after the least class.
TEST(ShapeTimes, ALargeStepsProductsAreTimedColdAndCostedSo) {
    PlanBase base = testing::tiny_gpt_base(4);
    base.spec.model = std::make_shared<GptFamily>(GptOptions{512, 64, 128, 4, 4}, GptDataOptions{});
    Strategy s;
    s.micro_batch = 2;
    s.grad_accum = 2;
    const int64_t cls =
        cold_class_bytes(step_bytes_between_uses(plan_memory(base, s), ranks_on_host(base, s)));
    ASSERT_GT(cls, int64_t{4} << 20);  // about 0.9M parameters with AdamW: over 10 MiB
    MachineProfile prof = round_profile();
    const PlanCost at_class_rate = plan_cost(base, s, &prof);
    measure_plan_shapes(prof, base, {{s}});
    const std::vector<GemmShape> g = base.spec.model->gemm_shapes(2, 1);
    ASSERT_TRUE(gemm_shapes_seconds(prof, DType::kF32, 1, g, cls));  // every lane, in its class
    const std::string suffix = str_cat(" after ", cls >> 20, "MiB");
    for (const auto& [key, sec] : prof.shape_s) EXPECT_NE(key.find(suffix), std::string::npos);
    for (auto& [key, sec] : prof.shape_s) sec = 1e-5;
    const PlanCost cold = plan_cost(base, s, &prof);
    EXPECT_NE(cold.time.compute, at_class_rate.time.compute);
    // Warm times of the same lanes change nothing: the layout's class is what it reads.
    std::map<std::string, double> warm;
    for (const auto& [key, sec] : prof.shape_s) warm[key.substr(0, key.find(" after "))] = 1.0;
    prof.shape_s.insert(warm.begin(), warm.end());
    EXPECT_EQ(plan_cost(base, s, &prof).time.compute, cold.time.compute);

    // The small model's step has the least class.
    const PlanBase small = testing::tiny_gpt_base(4);
    ASSERT_LT(step_bytes_between_uses(plan_memory(small, s), 1), 2 << 20);
    MachineProfile q = round_profile();
    measure_plan_shapes(q, small, {{s}});
    ASSERT_FALSE(q.shape_s.empty());
    for (const auto& [key, sec] : q.shape_s) EXPECT_NE(key.find(" after 4MiB"), std::string::npos);
}

// Note [Shapes timed on a quiet host]: a timing during which other processes held more than
// kBusyOtherCores is done again; busy twice, its times serve the plan but are not to be kept.
TEST(ShapeTimes, BusyHostTimesAgainAndKeepsNothingWhenStillBusy) {
    const PlanBase base = testing::tiny_gpt_base();
    Strategy s;
    s.micro_batch = 2;
    s.grad_accum = 4;
    std::vector<double> load;  // what the probe reports, attempt by attempt
    int calls = 0;
    const LoadProbe probe = [&](const std::function<void()>& fn) {
        fn();
        return load[static_cast<size_t>(calls++)];
    };
    MachineProfile quiet;
    load = {0.0};
    const QuietShapes a = measure_plan_shapes_quietly(quiet, base, {{s}}, probe);
    EXPECT_GT(a.measured, 0);
    EXPECT_TRUE(a.keep);
    EXPECT_EQ(calls, 1);
    EXPECT_EQ(busy_shapes_note(a), "");

    MachineProfile once;
    calls = 0;
    load = {1.0, 0.1};  // busy, then quiet: timed twice, kept
    const QuietShapes b = measure_plan_shapes_quietly(once, base, {{s}}, probe);
    EXPECT_EQ(calls, 2);
    EXPECT_TRUE(b.keep);
    EXPECT_EQ(b.measured, a.measured);  // the busy attempt's times were dropped, all timed again
    EXPECT_EQ(once.shape_s.size(), quiet.shape_s.size());

    MachineProfile busy;
    calls = 0;
    load = {1.0, 0.9};
    const QuietShapes c = measure_plan_shapes_quietly(busy, base, {{s}}, probe);
    EXPECT_EQ(calls, 2);
    EXPECT_FALSE(c.keep);
    EXPECT_EQ(c.other_cores, 0.9);
    EXPECT_EQ(busy.shape_s.size(), quiet.shape_s.size());  // for the plan at hand
    EXPECT_NE(busy_shapes_note(c).find("not kept"), std::string::npos) << busy_shapes_note(c);

    MachineProfile none = quiet;  // nothing left to time: quiet or not, nothing to keep or drop
    calls = 0;
    load = {3.0};
    const QuietShapes d = measure_plan_shapes_quietly(none, base, {{s}}, probe);
    EXPECT_EQ(d.measured, 0);
    EXPECT_TRUE(d.keep);
    EXPECT_EQ(calls, 1);
}

// Note [Collectives at the run's rank count]: the local backend's collectives are measured at a
// plan's rank count when the profile lacks them, once more on a busy host, and left out when
// busy twice; other backends, one rank and counts past kMaxFilledRanks measure nothing.
TEST(ShapeTimes, LocalCollectivesMeasuredAtTheRunsRankCountOnAQuietHost) {
    std::vector<double> load;
    int probes = 0;
    const LoadProbe probe = [&](const std::function<void()>& fn) {
        fn();
        return load[static_cast<size_t>(probes++)];
    };
    std::vector<int> measured;
    const auto measure = [&](int ranks) {
        measured.push_back(ranks);
        CommProfile c;
        c.backend = "local";
        c.ranks = ranks;
        c.all_reduce = {1e-4 * ranks, 1e9, {}};
        c.rendezvous_s = 0;
        return c;
    };
    MachineProfile p = testing::round_profile();  // local at 2 ranks
    load = {0.0};
    QuietShapes q = fill_local_comm(p, "local", 2, probe, measure);
    EXPECT_EQ(q.measured, 0);  // already there
    EXPECT_TRUE(measured.empty());
    q = fill_local_comm(p, "local", 4, probe, measure);
    EXPECT_EQ(q.measured, 1);
    EXPECT_TRUE(q.keep);
    ASSERT_EQ(p.comm.size(), 2u);
    EXPECT_EQ(p.comm_for("local", 4)->all_reduce.latency_s, 4e-4);
    EXPECT_NE(local_comm_note(q, 4).find("collectives of 4 local ranks timed now"),
              std::string::npos);
    q = fill_local_comm(p, "local", 4, probe, measure);  // now kept: not again
    EXPECT_EQ(measured, std::vector<int>{4});

    probes = 0;
    load = {1.0, 0.1};  // busy, then quiet
    q = fill_local_comm(p, "local", 3, probe, measure);
    EXPECT_EQ(q.measured, 1);
    EXPECT_EQ(probes, 2);
    EXPECT_EQ(p.comm.size(), 3u);  // the busy attempt's fit left out

    probes = 0;
    load = {1.0, 0.9};  // busy twice: nothing added, the nearest fit serves
    q = fill_local_comm(p, "local", 8, probe, measure);
    EXPECT_EQ(q.measured, 0);
    EXPECT_FALSE(q.keep);
    EXPECT_EQ(p.comm.size(), 3u);
    EXPECT_EQ(p.comm_for("local", 8)->ranks, 4);
    EXPECT_NE(local_comm_note(q, 8).find("busy"), std::string::npos) << local_comm_note(q, 8);

    measured.clear();
    probes = 0;
    load = {0.0, 0.0, 0.0};
    EXPECT_EQ(fill_local_comm(p, "mpi", 8, probe, measure).measured, 0);
    EXPECT_EQ(fill_local_comm(p, "local", 1, probe, measure).measured, 0);
    EXPECT_EQ(fill_local_comm(p, "local", kMaxFilledRanks + 1, probe, measure).measured, 0);
    EXPECT_TRUE(measured.empty());
    EXPECT_EQ(local_comm_note(fill_local_comm(p, "mpi", 8, probe, measure), 8), "");

    // Note [Rendezvous on shared cores]: a fit of more ranks than cores measured before the
    // rendezvous was (-1) is measured again; one of a core per rank stands.
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    for (int ranks : {cores + 1, std::min(cores, kMaxFilledRanks)}) {
        if (ranks < 2 || ranks > kMaxFilledRanks) continue;
        MachineProfile old;
        CommProfile c;
        c.backend = "local";
        c.ranks = ranks;
        old.comm.push_back(c);  // rendezvous_s -1
        measured.clear();
        probes = 0;
        load = {0.0};
        const QuietShapes again = fill_local_comm(old, "local", ranks, probe, measure);
        EXPECT_EQ(again.measured, ranks > cores ? 1 : 0) << ranks;
        ASSERT_EQ(old.comm.size(), 1u);
        EXPECT_EQ(old.comm[0].rendezvous_s, ranks > cores ? 0.0 : -1.0) << ranks;
    }
}

// Sharded tables (Note [Sparse step by shape]): with an embedding section that shards the two
// larger tables, they leave the lookups and come back as one sparse shape, all sharded tables
// together; it is timed once through ShardedTables, and the cost model's compute grows by it.
TEST(ShapeTimes, ShardedTablesAreTimedWholeAsTheEngineRunsThem) {
    DlrmOptions o = small_dlrm();
    o.embedding.enabled = true;
    o.embedding.sharding = {ShardKind::kRow, ShardKind::kTable, ShardKind::kDataParallel};
    o.embedding.optimizer.kind = SparseOptimKind::kAdagrad;
    DlrmDataOptions d;
    d.hotness = 2;
    d.zipf = 1.2;
    const DlrmFamily m(o, d);
    const std::vector<LookupShape> l = m.lookup_shapes(32);
    ASSERT_EQ(l.size(), 1u);  // the replicated table only
    EXPECT_EQ(l[0].rows, 7);
    const std::vector<SparseShape> sp = m.sparse_shapes(32);
    ASSERT_EQ(sp.size(), 1u);
    EXPECT_EQ(sp[0].bags, 32);
    EXPECT_EQ(sp[0].per_bag, 2);
    EXPECT_EQ(sp[0].tables, (std::vector<std::pair<int64_t, int64_t>>{{300, 8}, {40, 8}}));
    EXPECT_EQ(sp[0].optimizer, "adagrad");
    EXPECT_EQ(sparse_time_key(2, sp[0]), "sparse f32 t2 32x2 z1.2 adagrad r300d8 r40d8");
    EXPECT_TRUE(DlrmFamily(small_dlrm(), d).sparse_shapes(32).empty());  // no embedding section
    MachineProfile p = round_profile();
    EXPECT_FALSE(sparse_shapes_seconds(p, 1, sp));
    set_num_threads(2);
    EXPECT_EQ(measure_sparse_shapes(p, 1, sp, 1e-4), 1);
    EXPECT_EQ(num_threads(), 2);
    EXPECT_EQ(measure_sparse_shapes(p, 1, sp, 1e-4), 0);  // kept
    const std::optional<double> sec = sparse_shapes_seconds(p, 1, sp);
    ASSERT_TRUE(sec);
    EXPECT_GT(*sec, 0);
    // The cost model adds it to the step's compute (the same layout without the shape timed
    // takes the lookups' and products' times only).
    PlanBase base = dlrm_base(64);
    base.spec.model = std::make_shared<DlrmFamily>(o, d);
    Strategy s;
    s.micro_batch = 32;
    s.grad_accum = 2;
    MachineProfile timed = round_profile();
    measure_plan_shapes(timed, base, std::vector<Strategy>{s});
    MachineProfile untimed = timed;
    ASSERT_EQ(untimed.shape_s.erase(sparse_time_key(1, sp[0])), 1u);
    EXPECT_GT(plan_cost(base, s, &timed).time.compute, plan_cost(base, s, &untimed).time.compute);
    EXPECT_EQ(plan_cost(base, s, &timed).time.emb_comm, 0);  // one rank exchanges nothing
}

// The same draws give what a micro-batch exchanges (its distinct ids, their rows' floats), and
// over dp ranks the cost model adds the four all-to-alls a micro-batch and the two all-gathers a
// step at the all-gather fit (Note [Sparse exchange time]). A profile that has the time but not
// the exchange (made before it was kept) is measured again.
TEST(ShapeTimes, ShardedTablesExchangeTheirDistinctRowsOverRanks) {
    DlrmOptions o = small_dlrm();
    o.embedding.enabled = true;
    o.embedding.sharding = {ShardKind::kRow, ShardKind::kTable, ShardKind::kDataParallel};
    DlrmDataOptions d;
    d.hotness = 2;
    const std::vector<SparseShape> sp = DlrmFamily(o, d).sparse_shapes(32);
    ASSERT_EQ(sp.size(), 1u);
    MachineProfile p = round_profile();
    EXPECT_FALSE(sparse_shapes_exchange(p, sp));
    ASSERT_EQ(measure_sparse_shapes(p, 1, sp, 1e-4), 1);
    const std::optional<SparseExchange> x = sparse_shapes_exchange(p, sp);
    ASSERT_TRUE(x);
    // Tables of 300 and 40 rows, 64 ids each: each table's distinct ids are at most
    // min(rows, 64), and Zipf draws repeat the head, so fewer than that.
    EXPECT_GT(x->ids, 2);
    EXPECT_LT(x->ids, 64 + 40);
    EXPECT_DOUBLE_EQ(x->floats, 8 * x->ids);  // both tables of dim 8
    std::map<std::string, double> without = p.shape_s;
    for (auto it = without.begin(); it != without.end();)
        it = it->first.rfind("sparse ids", 0) == 0 ? without.erase(it) : std::next(it);
    p.shape_s = without;
    EXPECT_FALSE(sparse_shapes_exchange(p, sp));
    EXPECT_EQ(measure_sparse_shapes(p, 1, sp, 1e-4), 1);
    EXPECT_TRUE(sparse_shapes_exchange(p, sp));

    const CommProfile& cp = *p.comm_for("local");
    const double lat = cp.all_gather.latency_s, bw = cp.all_gather.bus_bytes_per_s;
    ASSERT_GT(bw, 0);
    const double f = 3.0 / 4;  // 4 ranks: each sends 3/4 of its payload
    const double per_micro =
        (lat + f * 8 * 4 / bw) + (lat + f * 8 * x->ids / bw) + 2 * (lat + f * 4 * x->floats / bw);
    EXPECT_NEAR(sparse_exchange_seconds(cp, 4, 3, x), 3 * per_micro + 2 * lat, 1e-15);
    EXPECT_EQ(sparse_exchange_seconds(cp, 1, 3, x), 0);
    EXPECT_EQ(sparse_exchange_seconds(cp, 4, 3, std::nullopt), 0);

    PlanBase base = dlrm_base(64);
    base.spec.model = std::make_shared<DlrmFamily>(o, d);
    Strategy s;
    s.dp = 2;
    s.micro_batch = 32;
    const PlanCost c = plan_cost(base, s, &p);
    EXPECT_NEAR(c.time.emb_comm, sparse_exchange_seconds(cp, 2, 1, x), 1e-15);
    EXPECT_GT(c.time.emb_comm, 0);
    EXPECT_NEAR(c.time.comm_exposed(), c.time.dp_comm - c.time.dp_overlapped + c.time.emb_comm,
                1e-15);
}

// With every shape timed, the step's compute takes the products and lookups at their times in
// place of their FLOPs over the class rate and their ops' fixed cost (Note [Step time model]).
TEST(ShapeTimes, ComputeTakesTheTimedShapesInPlaceOfTheirFlops) {
    const PlanBase base = dlrm_base(64);
    const ModelFamily& m = *base.spec.model;
    MachineProfile prof = round_profile();
    prof.rates[0].op_overhead_s = 1e-6;
    Strategy s;
    s.micro_batch = 32;
    s.grad_accum = 2;
    const PlanCost before = plan_cost(base, s, &prof);
    const std::vector<GemmShape> g = m.gemm_shapes(32, 1);
    const std::vector<LookupShape> l = m.lookup_shapes(32);
    const std::vector<InteractionShape> x = m.interaction_shapes(32);
    measure_plan_shapes(prof, base, {{s}});  // every key, then overwritten with round times
    ASSERT_EQ(prof.shape_s.size(), 3 * g.size() + l.size() + x.size());
    for (auto& [key, sec] : prof.shape_s)
        sec = key.rfind("gemm", 0) == 0 ? 1e-5 : key.rfind("bag", 0) == 0 ? 3e-5 : 7e-5;
    const PlanCost after = plan_cost(base, s, &prof);
    const double flops = gemm_shapes_flops(g) + interaction_shapes_flops(x);
    // One micro-batch: the products' and the interaction's FLOPs at the large class's 2 GFLOP/s
    // (a family with no transformer shape takes the large class) and 3 ops each of the 4
    // weights go; 4 x 3 lanes at 10 us, 3 lookups at 30 us and the interaction's 70 us come.
    const double gone = flops / 2e9 + 3 * 4 * 1e-6, come = 12 * 1e-5 + 3 * 3e-5 + 7e-5;
    EXPECT_NEAR(after.time.compute, before.time.compute + 2 * (come - gone), 1e-12);
}

// Every rank times its own large product at once and gets every rank's speed over the fastest's
// (Note [Measured rank speeds]); kept through the profile file.
TEST(RankSpeeds, EveryRankGetsAllSpeedsTheFastestAtOne) {
    std::vector<std::vector<double>> got(2);
    run_local_ranks(2, [&](Communicator& c) {
        set_num_threads(1);
        got[static_cast<size_t>(c.rank())] = measure_rank_speeds(c);
    });
    ASSERT_EQ(got[0].size(), 2u);
    EXPECT_EQ(got[0], got[1]);
    EXPECT_DOUBLE_EQ(*std::max_element(got[0].begin(), got[0].end()), 1.0);
    for (double v : got[0]) EXPECT_GT(v, 0.0);
    MachineProfile p = round_profile();
    p.rank_speeds = got[0];
    EXPECT_EQ(profile_from_json(profile_json(p), "t").rank_speeds, got[0]);
    nlohmann::json bad = profile_json(p);
    bad["rank_speeds"] = {1.0, 1.5};
    EXPECT_THROW(profile_from_json(bad, "t"), Error);
}

}  // namespace
}  // namespace zt
