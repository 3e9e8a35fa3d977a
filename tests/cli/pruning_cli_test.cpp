// Pruning as a user runs it (docs/pruning.md): "compression": {"pruning": {...}} trains with the
// schedule's sparsity in every metrics line (the formula's count, per layer when the masks
// change), the exported Linear weights hold exactly that many zeros, a checkpoint resumes on
// another dp size and ZeRO stage and continues the uninterrupted run, a dense checkpoint starts
// pruning, the estimate counts the mask, and what does not prune is refused before any work.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "checkpoint/safetensors.h"
#include "cli/cli_fixture.h"
#include "compression/prune_mask.h"
#include "compression/prune_schedule.h"
#include "util/error.h"

using zt::testing::Cli;
using zt::testing::CommandResult;
namespace fs = std::filesystem;

namespace {

class PruningCli : public Cli {
  protected:
    // 8 samples a step on 1, 2 or 4 ranks; 2 layers of d_model 16.
    nlohmann::json config(int steps, int ranks) {
        nlohmann::json j = tiny();
        j["steps"] = steps;
        j["train_batch_size"] = 8;
        j["train_micro_batch_size_per_gpu"] = 8 / ranks;
        j["model"]["n_layers"] = 2;
        j["data"]["builtin_tokens"] = 1 << 14;
        j["eval_interval"] = 0;
        j["optimizer"]["params"] = {{"lr", 3e-3}, {"weight_decay", 0.1}};
        j["compression"]["pruning"] = {{"type", "magnitude"},   {"initial_sparsity", 0.1},
                                       {"final_sparsity", 0.5}, {"start_step", 2},
                                       {"end_step", 6},         {"frequency", 2}};
        return j;
    }
    // Elements of the Linear weights (c_attn, c_proj, c_fc, mlp c_proj) of config()'s model and
    // how many of them the exported weights hold as exact zeros.
    static std::pair<int64_t, int64_t> linear_zeros(const std::string& weights) {
        zt::SafetensorsFile f(weights);
        int64_t n = 0, zeros = 0;
        for (const auto& t : f.tensors()) {
            if (t.shape.size() != 2 || t.name.find(".h.") == std::string::npos) continue;
            std::vector<float> v(static_cast<size_t>(t.numel));
            f.read_f32(t.name, v.data(), t.numel);
            n += t.numel;
            for (float x : v) zeros += x == 0.0f;
        }
        return {n, zeros};
    }
    static zt::PruningOptions options() {
        zt::PruningOptions p;
        p.type = "magnitude";
        p.initial_sparsity = 0.1;
        p.final_sparsity = 0.5;
        p.start_step = 2;
        p.end_step = 6;
        p.frequency = 2;
        return p;
    }
};

}  // namespace

TEST_F(PruningCli, MetricsFollowTheScheduleAndTheWeightsHoldTheZeros) {
    ASSERT_EQ(train_run(config(7, 2), "run", "", 2).code, 0);
    const auto [n, zeros] = linear_zeros((dir_ / "run" / "model.safetensors").string());
    ASSERT_GT(n, 0);
    EXPECT_EQ(zeros, zt::prune_count(0.5, n));
    std::ifstream f(dir_ / "run" / "metrics.jsonl");
    std::string line;
    int64_t want = 0, lines = 0;
    const zt::PruningOptions p = options();
    while (std::getline(f, line)) {
        const nlohmann::json j = nlohmann::json::parse(line);
        if (!j.contains("loss")) continue;
        const int64_t step = j["step"];
        ASSERT_TRUE(j.contains("pruning")) << line;
        if (zt::prune_updates_at(p, step))
            want = zt::prune_count(zt::prune_sparsity_at(p, step), n);
        EXPECT_EQ(j["pruning"]["pruned"].get<int64_t>(), want) << line;
        EXPECT_DOUBLE_EQ(j["pruning"]["target"].get<double>(), zt::prune_sparsity_at(p, step));
        EXPECT_EQ(j["pruning"].contains("layers"), step == 1 || zt::prune_updates_at(p, step))
            << line;
        ++lines;
    }
    EXPECT_EQ(lines, 7);
}

// A checkpoint written by one layout resumes on another (dp and ZeRO stage), the mask with it,
// and the run continues like the uninterrupted one.
TEST_F(PruningCli, CheckpointsResumeOnAnotherLayout) {
    nlohmann::json full = config(6, 1);
    full["checkpoint"] = {{"interval_steps", 3}};
    ASSERT_EQ(train_run(full, "full", "", 1).code, 0);
    const RunLog ref = read_run("full");
    struct Layout {
        int ranks, zero;
    };
    const std::vector<std::pair<Layout, Layout>> cases = {{{1, 0}, {2, 3}}, {{4, 2}, {2, 1}}};
    for (const auto& [from, to] : cases) {
        const std::string run =
            zt::str_cat("dp", from.ranks, "s", from.zero, "_to_dp", to.ranks, "s", to.zero);
        nlohmann::json a = config(3, from.ranks), b = config(6, to.ranks);
        a["checkpoint"] = b["checkpoint"] = {{"interval_steps", 3}};
        a["zero_optimization"] = {{"stage", from.zero}};
        b["zero_optimization"] = {{"stage", to.zero}};
        ASSERT_EQ(train_run(a, run, "", from.ranks).code, 0) << run;
        const CommandResult r = train_run(b, run, "--resume", to.ranks);
        ASSERT_EQ(r.code, 0) << run << r.output;
        expect_close(read_run(run), ref, run);
        const auto [n, zeros] = linear_zeros((dir_ / run / "model.safetensors").string());
        EXPECT_EQ(zeros, zt::prune_count(0.5, n)) << run;
    }
}

// A dense run's checkpoint (no mask) resumes into a pruning run, which prunes from there.
TEST_F(PruningCli, ADenseCheckpointStartsPruning) {
    nlohmann::json dense = config(3, 1);
    dense.erase("compression");
    dense["checkpoint"] = {{"interval_steps", 3}};
    ASSERT_EQ(train_run(dense, "run", "", 1).code, 0);
    nlohmann::json pruned = config(7, 1);
    pruned["checkpoint"] = {{"interval_steps", 3}};
    const CommandResult r = train_run(pruned, "run", "--resume", 1);
    ASSERT_EQ(r.code, 0) << r.output;
    const auto [n, zeros] = linear_zeros((dir_ / "run" / "model.safetensors").string());
    EXPECT_EQ(zeros, zt::prune_count(0.5, n));
}

TEST_F(PruningCli, EstimateCountsTheMaskAsOptimizerState) {
    auto optimizer_bytes = [&](const nlohmann::json& j) {
        const CommandResult r =
            zt::testing::run_zerotrain("estimate " + write_config(j) + " --json");
        EXPECT_EQ(r.code, 0) << r.output;
        const nlohmann::json e = nlohmann::json::parse(r.output);
        return e["device"]["optimizer"].get<int64_t>();
    };
    nlohmann::json dense = config(3, 1);
    dense.erase("compression");
    // AdamW holds two states per weight; pruning adds the mask: three.
    EXPECT_EQ(optimizer_bytes(config(3, 1)) * 2, optimizer_bytes(dense) * 3);
}

TEST_F(PruningCli, WhatDoesNotPruneIsRefusedBeforeAnyWork) {
    struct Case {
        nlohmann::json pruning;
        int tp;
        const char* says;
    };
    const std::vector<Case> cases = {
        {{{"type", "magnitude"}}, 1, "final_sparsity: required"},
        {{{"type", "nm"}, {"final_sparsity", 0.5}}, 1, "not used by N:M pruning"},
        {{{"type", "nm"}, {"n", 4}, {"m", 4}}, 1, "expected fewer than m = 4"},
        {{{"type", "structured"}, {"final_sparsity", 0.3}, {"n", 2}},
         1,
         "not used by structured pruning"},
        {{{"type", "magnitude"}, {"final_sparsity", 0.3}, {"params", {"nothing"}}},
         1,
         "no Linear weight's name contains any of \"nothing\""},
        {{{"type", "magnitude"}, {"final_sparsity", 0.3}, {"start_step", 5}, {"end_step", 2}},
         1,
         "end_step"},
    };
    for (const Case& c : cases) {
        nlohmann::json j = config(3, 1);
        j["compression"]["pruning"] = c.pruning;
        if (c.tp > 1) {
            j["parallel"]["tensor"] = c.tp;
            j["train_micro_batch_size_per_gpu"] = 8;
        }
        const CommandResult r = train_run(j, "bad", "", c.tp);
        EXPECT_EQ(r.code, 2) << c.pruning.dump() << r.output;
        EXPECT_NE(r.output.find(c.says), std::string::npos) << c.pruning.dump() << r.output;
        EXPECT_FALSE(fs::exists(dir_ / "bad" / "model.safetensors"));
    }
}
