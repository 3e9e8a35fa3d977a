// `zerotrain estimate`'s per-stage figures (runtime/run_estimate.h estimate_layout, planner/
// stage_memory.h) against what each stage's ranks hold: for every stage of pp2, an uneven pp2,
// tp2 x pp2, interleaved pp2 and dp2 x pp2 at ZeRO-1, the params, grads and optimizer bytes the
// estimate gives are those the tracked pool holds after a step, on every rank of the stage; the
// activations are the cost model's (plan_memory_of_stage) for that stage, with the planner's
// own view of the config. Ranks are threads (local backend).
#include <gtest/gtest.h>

#include <mutex>

#include "comm/local/local_comm.h"
#include "planner/stage_memory.h"
#include "runtime/pipeline_step.h"
#include "runtime/plan_config.h"
#include "runtime/run_estimate.h"
#include "runtime/trainer.h"
#include "tensor/threads.h"

namespace zt {
namespace {

constexpr int64_t kV = 48, kT = 8, kMicro = 2, kMicroBatches = 4;

struct Mesh {
    std::string name;
    int dp = 1, tp = 1, pp = 2;
    nlohmann::json pipeline;  // parallel.pipeline
    int zero = 0;
};

nlohmann::json config_of(const Mesh& m) {
    nlohmann::json j = {
        {"train_batch_size", kMicro * kMicroBatches * m.dp},
        {"train_micro_batch_size_per_gpu", kMicro},
        {"steps", 1},
        {"threads", 1},
        {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 1e-3}}}}},
        {"model",
         {{"type", "gpt"},
          {"vocab_size", kV},
          {"seq_len", kT},
          {"d_model", 16},
          {"n_layers", 4},
          {"n_heads", 4}}},
        {"data", {{"type", "builtin"}, {"builtin_tokens", 4096}}},
        {"zero_optimization", {{"stage", m.zero}}},
    };
    j["parallel"]["pipeline"] = m.pipeline;
    j["parallel"]["pipeline"]["stages"] = m.pp;
    j["parallel"]["pipeline"]["micro_batches"] = kMicroBatches;
    if (m.tp > 1) j["parallel"]["tensor"] = m.tp;
    return j;
}

constexpr MemCategory kState[3] = {MemCategory::kParams, MemCategory::kGrads,
                                   MemCategory::kOptimizer};

struct Held {
    int stage = 0;
    int64_t bytes[3] = {};  // params, grads, optimizer after one step
};

// One step of cfg on every rank of its mesh, and what each rank's pool holds after it.
std::vector<Held> measure(const TrainConfig& cfg) {
    const int world = static_cast<int>(cfg.dp * cfg.tp) * cfg.pipe.stages;
    std::vector<Held> out(static_cast<size_t>(world));
    std::mutex mu;
    run_local_ranks(world, [&](Communicator& c) {
        set_num_threads(1);
        const RunMesh mesh = split_run_mesh(&c, static_cast<int>(cfg.tp), cfg.pipe.stages);
        EngineOptions eo = engine_options(cfg);
        eo.comm = mesh.dp;
        eo.tp = mesh.tp;
        eo.pp = mesh.pp;
        eo.tied = mesh.tied;
        MemoryPool pool;
        Engine e(pool, build_pipeline_stage(cfg, mesh), std::move(eo));
        PipelineStep step(e, mesh, cfg);
        std::vector<int32_t> x(kMicro * kT), y(kMicro * kT);
        for (int64_t m = 0; m < kMicroBatches; ++m) {
            for (int64_t i = 0; i < kMicro * kT; ++i) {
                x[static_cast<size_t>(i)] = static_cast<int32_t>((7 * i + 3 * m) % kV);
                y[static_cast<size_t>(i)] = static_cast<int32_t>((7 * i + 3 * m + 1) % kV);
            }
            step.add(Batch{x, y, kMicro, kT});
        }
        step.run();
        e.step();
        step.finish();
        const MemoryStats ms = pool.stats();
        std::lock_guard lock(mu);
        Held& h = out[static_cast<size_t>(c.rank())];
        h.stage = mesh.coord.pp;
        for (int k = 0; k < 3; ++k) h.bytes[k] = ms.current[static_cast<size_t>(kState[k])];
    });
    return out;
}

TEST(PipelineEstimate, EachStagesStateBytesAreWhatItsRanksHold) {
    const std::vector<Mesh> meshes = {
        {"pp2", 1, 1, 2, {{"schedule", "1f1b"}}, 0},
        {"pp2 uneven 3+1", 1, 1, 2, {{"schedule", "1f1b"}, {"partition", {3, 1}}}, 0},
        {"pp2 uneven 1+3, zero bubble",
         1,
         1,
         2,
         {{"schedule", "zero_bubble"}, {"partition", {1, 3}}},
         0},
        {"tp2 x pp2", 1, 2, 2, {{"schedule", "1f1b"}}, 0},
        {"pp2 interleaved v2", 1, 1, 2, {{"schedule", "interleaved"}, {"virtual_stages", 2}}, 0},
        {"dp2 x pp2 ZeRO-1", 2, 1, 2, {{"schedule", "1f1b"}, {"partition", {3, 1}}}, 1},
    };
    for (const Mesh& m : meshes) {
        SCOPED_TRACE(m.name);
        const TrainConfig cfg = parse_config(config_of(m), m.dp * m.tp * m.pp).config;
        const EstimateSpec spec = estimate_spec(cfg, cfg.zero.stage, false, cfg.dp);
        const EstimateLayout l = estimate_layout(cfg, spec);
        const std::vector<StageMemory> stages = stage_memories(l.base, l.strategy);
        ASSERT_EQ(stages.size(), static_cast<size_t>(m.pp));
        // The planner's own view of the config (zerotrain plan), at the run's ZeRO stage.
        const PlanBase base = plan_base(cfg, 1, "local", 0);
        const Strategy s = strategy_of(cfg);
        for (int k = 0; k < m.pp; ++k) {
            const Estimate planned = plan_memory_of_stage(base, s, k);
            const int a = static_cast<int>(MemCategory::kActivations);
            EXPECT_EQ(stages[static_cast<size_t>(k)].memory.device[a], planned.device[a])
                << "stage " << k;
            EXPECT_EQ(stages[static_cast<size_t>(k)].blocks, stage_blocks(base, s, k));
        }
        const std::vector<Held> held = measure(cfg);
        for (size_t r = 0; r < held.size(); ++r) {
            const StageMemory& est = stages[static_cast<size_t>(held[r].stage)];
            EXPECT_GT(held[r].bytes[0], 0) << "rank " << r;
            for (int c = 0; c < 3; ++c) {
                EXPECT_EQ(held[r].bytes[c], est.memory.device[static_cast<int>(kState[c])])
                    << "rank " << r << ", stage " << held[r].stage << ": "
                    << mem_category_name(kState[c]);
            }
        }
        // The headline (plan_memory) is the most loaded stage's: each figure the largest.
        const Estimate most = plan_memory(l.base, l.strategy);
        for (MemCategory c : kState) {
            int64_t largest = 0;
            for (const StageMemory& st : stages)
                largest = std::max(largest, st.memory.device[static_cast<int>(c)]);
            EXPECT_EQ(most.device[static_cast<int>(c)], largest) << mem_category_name(c);
        }
    }
}

TEST(PipelineEstimate, BlockRangesText) {
    EXPECT_EQ(block_ranges_text({0, 1, 2}), "0-2");
    EXPECT_EQ(block_ranges_text({3}), "3");
    EXPECT_EQ(block_ranges_text({0, 2, 3}), "0, 2-3");
    EXPECT_EQ(block_ranges_text({}), "none");
}

}  // namespace
}  // namespace zt
