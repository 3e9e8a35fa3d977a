// Structured pruning in the engine (docs/pruning.md, "Structured") on the local backend: after
// every step at ZeRO stages 0-3 on 1, 2 and 4 ranks, each layer has exactly the schedule's number
// of heads and MLP channels whose every weight (c_attn rows and bias, attn.c_proj columns; c_fc
// row and bias, mlp.c_proj column) is 0, and every other weight of those matrices nonzero where
// the dense run's is; every layout picks the same units and trains like one process; the mask
// resumes on another stage; and the compacted model (GptFamily::compact) gives the masked model's
// loss at the smaller size.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "comm/local/local_comm.h"
#include "models/gpt/gpt.h"
#include "models/gpt/gpt_family.h"
#include "models/gpt/gpt_memory.h"
#include "optim/adamw.h"
#include "runtime/engine.h"
#include "runtime/toy_sequences.h"
#include "tensor/threads.h"

namespace zt {
namespace {

// 2 layers, d_model 18, 3 heads of 6, d_ff 72: counts that 4 ranks do not divide.
constexpr int64_t kV = 48, kT = 8, kSteps = 10, kMicro = 2;
const GptOptions kModel{kV, kT, 18, 2, 3};

struct StructSetup {
    int ranks = 1;
    int stage = 0;
    int64_t grad_accum = 2;  // per rank
    PruningOptions pruning;
    GptOptions model = kModel;
    DType compute = DType::kF32;
    std::string offload = "none";
};

struct StructRun {
    std::vector<double> loss;
    std::vector<std::vector<float>> weights;  // whole master after each step
    std::vector<nlohmann::json> metrics;      // the pruner's after each step
};

PruningOptions structured() {
    PruningOptions p;
    p.type = "structured";
    p.heads = 0.7;     // floor(0.7 x 3) = 2 of 3 heads at the end
    p.channels = 0.3;  // floor(0.3 x 72) = 21 of 72 channels
    p.start_step = 2;
    p.end_step = 8;
    p.frequency = 3;  // updates after steps 2, 5, 8
    return p;
}

std::unique_ptr<Engine> make_engine(MemoryPool& pool, const StructSetup& s, Communicator* comm) {
    EngineOptions eo;
    eo.grad_accum = s.grad_accum;
    eo.compute_dtype = s.compute;
    eo.offload_optimizer.device = s.offload;
    eo.gradient_clipping = 1.0;
    eo.lr = 3e-3;
    eo.seed = 5;
    AdamWOptions ao;
    ao.weight_decay = 0.1;
    eo.optimizer = std::make_unique<AdamW>(ao);
    eo.comm = comm;
    eo.zero.stage = s.stage;
    eo.zero.reduce_bucket_size = 700;
    eo.zero.allgather_bucket_size = 1000;
    eo.pruning = s.pruning;
    return std::make_unique<Engine>(pool, std::make_unique<Gpt>(s.model), std::move(eo));
}

void train_steps(Engine& e, const StructSetup& s, int rank, int64_t from, int64_t to,
                 StructRun* out) {
    std::vector<int32_t> in(kMicro * kT), tg(kMicro * kT);
    for (int64_t step = from; step < to; ++step) {
        for (int64_t m = 0; m < s.grad_accum; ++m) {
            testing::toy_micro_batch(in, tg, step, m, rank, kMicro, s.grad_accum, s.ranks, kT, kV);
            e.forward_backward(Batch{in, tg, kMicro, kT});
        }
        const StepStats st = e.step();
        std::vector<float> w = e.gather_master();
        if (rank == 0) {
            out->loss.push_back(st.loss);
            out->weights.push_back(std::move(w));
            if (e.pruner()) out->metrics.push_back(e.pruner()->metrics(e.steps_done(), false));
        }
    }
}

StructRun train(const StructSetup& s) {
    StructRun r;
    run_local_ranks(s.ranks, [&](Communicator& c) {
        set_num_threads(1);
        MemoryPool pool;
        auto e = make_engine(pool, s, s.ranks > 1 ? &c : nullptr);
        train_steps(*e, s, c.rank(), 0, kSteps, &r);
    });
    return r;
}

// The model's unit groups at the arena offsets the engine gives its parameters (in order).
std::vector<PruneUnitGroup> groups() {
    Gpt g(kModel);
    int64_t off = 0;
    for (Parameter* p : g.parameters()) {
        p->offset = off;
        off += p->numel();
    }
    return g.prune_groups();
}

// Per group, the units whose every element is 0 in w, and the number of zeros elsewhere in the
// groups' elements (a partly zeroed unit: none expected).
struct UnitZeros {
    std::vector<std::vector<int64_t>> whole;
    int64_t stray = 0;
};

UnitZeros unit_zeros(const std::vector<float>& w) {
    UnitZeros z;
    for (const PruneUnitGroup& g : groups()) {
        // The weights only: biases start at 0, and c_attn's k bias has no gradient (softmax
        // ignores a constant added to a query's scores), so it stays 0.
        PruneUnitGroup weights = g;
        std::erase_if(weights.slices, [](const PruneSlice& s) { return s.cols == 1; });
        z.whole.emplace_back();
        for (int64_t u = 0; u < g.units; ++u) {
            int64_t zeros = 0, n = 0;
            for_each_unit_element(g, u, [&](int64_t i) {
                zeros += w[static_cast<size_t>(i)] == 0.0f;
                ++n;
            });
            if (zeros == n) {
                z.whole.back().push_back(u);
                continue;
            }
            for_each_unit_element(weights, u,
                                  [&](int64_t i) { z.stray += w[static_cast<size_t>(i)] == 0.0f; });
        }
    }
    return z;
}

// After every step each group has whole-zero units in the formula's count at the last update.
void expect_schedule(const StructRun& r, const PruningOptions& p, const std::string& what) {
    const std::vector<PruneUnitGroup> gs = groups();
    int64_t heads = 0, channels = 0;
    for (int64_t step = 1; step <= kSteps; ++step) {
        if (prune_updates_at(p, step)) {
            heads = prune_count(prune_heads_at(p, step), kModel.n_heads);
            channels = prune_count(prune_channels_at(p, step), kModel.mlp_width());
        }
        const UnitZeros z = unit_zeros(r.weights[static_cast<size_t>(step - 1)]);
        for (size_t g = 0; g < gs.size(); ++g)
            EXPECT_EQ(static_cast<int64_t>(z.whole[g].size()),
                      gs[g].kind == "heads" ? heads : channels)
                << what << " step " << step << " " << gs[g].name;
        EXPECT_EQ(z.stray, 0) << what << " step " << step;
        const nlohmann::json& m = r.metrics[static_cast<size_t>(step - 1)];
        EXPECT_EQ(m["heads"]["pruned"].get<int64_t>(), heads) << what << " step " << step;
        EXPECT_EQ(m["channels"]["pruned"].get<int64_t>(), channels) << what << " step " << step;
        EXPECT_DOUBLE_EQ(m["heads"]["target"].get<double>(), prune_heads_at(p, step));
    }
    EXPECT_EQ(heads, 2);
    EXPECT_EQ(channels, 21);
}

TEST(StructuredPruning, WholeUnitsStayZeroAndEveryLayoutTrainsLikeOneProcess) {
    StructSetup one;
    one.grad_accum = 4;
    one.pruning = structured();
    const StructRun ref = train(one);
    expect_schedule(ref, one.pruning, "one process");
    const UnitZeros ref_units = unit_zeros(ref.weights.back());
    for (int ranks : {2, 4})
        for (int stage = 0; stage <= 3; ++stage) {
            if (ranks == 4 && (stage == 0 || stage == 2)) continue;  // time: 1 and 3 cover it
            StructSetup s;
            s.ranks = ranks;
            s.stage = stage;
            s.grad_accum = 4 / ranks;
            s.pruning = structured();
            const StructRun r = train(s);
            const std::string what = str_cat(ranks, " ranks, stage ", stage);
            expect_schedule(r, s.pruning, what);
            EXPECT_EQ(unit_zeros(r.weights.back()).whole, ref_units.whole) << what;
            double worst = 0;
            for (size_t i = 0; i < r.loss.size(); ++i)
                worst = std::max(worst, std::fabs(r.loss[i] - ref.loss[i]) / ref.loss[i]);
            EXPECT_LE(worst, 1e-4) << what;  // DESIGN's fp32 tolerance
        }
}

// bf16 compute with the optimizer offloaded to the host, ZeRO-2 on 2 ranks: the same whole
// units in the formula's count after every step.
TEST(StructuredPruning, Bf16AndOffloadedOptimizerKeepWholeUnits) {
    StructSetup s;
    s.ranks = 2;
    s.stage = 2;
    s.compute = DType::kBF16;
    s.offload = "cpu";
    s.pruning = structured();
    expect_schedule(train(s), s.pruning, "bf16, offloaded, stage 2");
}

// A run stopped after step 6 (after the update of step 5: 1 head, 18 channels; one to come) and
// resumed from its state on another ZeRO stage and rank count continues the uninterrupted run.
TEST(StructuredPruning, MaskResumesOnAnotherLayout) {
    StructSetup s;
    s.ranks = 2;
    s.stage = 3;
    s.grad_accum = 1;
    s.pruning = structured();
    const StructRun full = train(s);
    std::vector<std::vector<float>> whole;
    EngineCounters counters;
    run_local_ranks(2, [&](Communicator& c) {
        set_num_threads(1);
        MemoryPool pool;
        auto a = make_engine(pool, s, &c);
        StructRun first;
        train_steps(*a, s, c.rank(), 0, 6, &first);
        UpdateState& sa = a->update_state();
        std::vector<std::vector<float>> mine_all;
        for (size_t k = 0; k < sa.names().size(); ++k) {
            std::vector<float> mine(static_cast<size_t>(sa.numel()));
            sa.read(static_cast<int>(k), 0, sa.numel(), mine.data());
            mine_all.push_back(a->data_parallel().gather_update_ranges(mine.data()));
        }
        if (c.rank() == 0) {
            whole = std::move(mine_all);
            counters = a->counters();
        }
    });
    StructSetup s1 = s;  // one process, stage 0, the same global batch
    s1.ranks = 1;
    s1.stage = 0;
    s1.grad_accum = 2;
    StructRun resumed;
    {
        set_num_threads(1);
        MemoryPool pool;
        auto b = make_engine(pool, s1, nullptr);
        UpdateState& sb = b->update_state();
        for (size_t k = 0; k < whole.size(); ++k)
            sb.write(static_cast<int>(k), 0, sb.numel(), whole[k].data());
        b->restore(counters);
        EXPECT_EQ(b->pruner()->metrics(6, false)["heads"]["pruned"].get<int64_t>(), 1);
        EXPECT_EQ(b->pruner()->metrics(6, false)["channels"]["pruned"].get<int64_t>(), 18);
        train_steps(*b, s1, 0, 6, kSteps, &resumed);
    }
    const UnitZeros a = unit_zeros(resumed.weights.back()), b = unit_zeros(full.weights.back());
    EXPECT_EQ(a.whole, b.whole);
    for (size_t i = 0; i < resumed.loss.size(); ++i)
        EXPECT_NEAR(resumed.loss[i], full.loss[i + 6], 1e-4 * full.loss[i + 6]) << i;
}

// The compacted model computes the masked model's loss (within fp32 rounding) with fewer
// parameters: 1 of 3 heads and 51 of 72 channels per layer.
TEST(StructuredPruning, CompactModelGivesTheMaskedLoss) {
    StructSetup s;
    s.pruning = structured();
    set_num_threads(1);
    MemoryPool pool;
    auto e = make_engine(pool, s, nullptr);
    StructRun r;
    train_steps(*e, s, 0, 0, kSteps, &r);
    std::vector<float> master = e->gather_master();
    std::vector<NamedTensorF32> named;
    for (Parameter* p : e->arena().params())
        named.push_back({p->name, p->shape, master.data() + p->offset});
    const GptFamily family(kModel, GptDataOptions{});
    CompactModel cm = family.compact(named, "");
    EXPECT_EQ(cm.model["n_heads"], 1);
    EXPECT_EQ(cm.model["head_dim"], 6);
    EXPECT_EQ(cm.model["d_ff"], 51);
    GptOptions small = kModel;
    small.n_heads = 1;
    small.head_dim = 6;
    small.d_ff = 51;
    StructSetup ss;
    ss.model = small;
    MemoryPool pool2;
    auto c = make_engine(pool2, ss, nullptr);
    std::map<std::string, size_t> index;
    for (size_t i = 0; i < cm.names.size(); ++i) index[cm.names[i]] = i;
    std::vector<float> whole(static_cast<size_t>(c->arena().padded_numel()), 0.0f);
    int64_t params = 0;
    for (Parameter* p : c->arena().params()) {
        const size_t i = index.at(p->name);
        ASSERT_EQ(cm.shapes[i], p->shape) << p->name;
        std::copy(cm.data[i].begin(), cm.data[i].end(), whole.begin() + p->offset);
        params += p->numel();
    }
    c->load_master(whole.data());
    EXPECT_EQ(params, gpt_param_count(small));
    EXPECT_LT(params, gpt_param_count(kModel));
    std::vector<int32_t> in(kMicro * kT), tg(kMicro * kT);
    for (int64_t k = 0; k < 4; ++k) {
        testing::toy_micro_batch(in, tg, 100 + k, 0, 0, kMicro, 1, 1, kT, kV);
        const float masked = e->eval_loss(Batch{in, tg, kMicro, kT});
        const float compact = c->eval_loss(Batch{in, tg, kMicro, kT});
        EXPECT_NEAR(compact, masked, 1e-5 * masked) << k;
    }
}

}  // namespace
}  // namespace zt
