// Rows pruning of DLRM's embedding tables as a user runs it (docs/pruning.md, "rows"): the
// metrics count floor(fraction x rows) rows of every table, the exported tables hold exactly
// that many zero rows, a checkpoint resumes the uninterrupted run bit for bit on the same layout
// (the row counts with it) and within the equivalence rule's tolerance on another dp size and
// ZeRO stage, and what rows pruning cannot do is refused before any work.
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

const std::vector<int64_t> kRows = {301, 70, 13};
constexpr int64_t kDim = 8;

class PruneRowsCli : public Cli {
  protected:
    // 16 samples a step on 1, 2 or 4 ranks.
    static nlohmann::json config(int steps, int ranks) {
        return {{"train_batch_size", 16},
                {"train_micro_batch_size_per_gpu", 16 / ranks},
                {"steps", steps},
                {"steps_per_print", 1},
                {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 1e-2}}}}},
                {"model",
                 {{"type", "dlrm"},
                  {"table_rows", kRows},
                  {"embedding_dim", kDim},
                  {"bottom_mlp", {16, kDim}},
                  {"top_mlp", {16}}}},
                {"data", {{"type", "synthetic"}, {"records", 2000}}},
                {"compression",
                 {{"pruning",
                   {{"type", "rows"},
                    {"final_sparsity", 0.5},
                    {"start_step", 2},
                    {"end_step", 6},
                    {"frequency", 2}}}}},
                {"eval_interval", 0},
                {"threads", 1}};
    }
    static zt::PruningOptions options() {
        zt::PruningOptions p;
        p.type = "rows";
        p.final_sparsity = 0.5;
        p.start_step = 2;
        p.end_step = 6;
        p.frequency = 2;
        return p;
    }
    // Zero rows of each exported table (emb_l.K.weight).
    std::vector<int64_t> zero_rows(const std::string& run) {
        zt::SafetensorsFile f((dir_ / run / "model.safetensors").string());
        std::vector<int64_t> out;
        for (size_t k = 0; k < kRows.size(); ++k) {
            const std::string name = "emb_l." + std::to_string(k) + ".weight";
            std::vector<float> v(static_cast<size_t>(kRows[k] * kDim));
            f.read_f32(name, v.data(), static_cast<int64_t>(v.size()));
            int64_t z = 0;
            for (int64_t r = 0; r < kRows[k]; ++r) {
                bool zero = true;
                for (int64_t c = 0; c < kDim; ++c) zero = zero && v[r * kDim + c] == 0.0f;
                z += zero;
            }
            out.push_back(z);
        }
        return out;
    }
};

}  // namespace

TEST_F(PruneRowsCli, MetricsFollowTheScheduleAndTheTablesHoldTheZeroRows) {
    ASSERT_EQ(train_run(config(7, 2), "run", "", 2).code, 0);
    const std::vector<int64_t> z = zero_rows("run");
    for (size_t k = 0; k < kRows.size(); ++k) EXPECT_EQ(z[k], kRows[k] / 2) << k;
    std::ifstream f(dir_ / "run" / "metrics.jsonl");
    std::string line;
    int64_t want = 0, lines = 0;
    const zt::PruningOptions p = options();
    while (std::getline(f, line)) {
        const nlohmann::json j = nlohmann::json::parse(line);
        if (!j.contains("loss")) continue;
        const int64_t step = j["step"];
        ASSERT_TRUE(j.contains("pruning")) << line;
        if (zt::prune_updates_at(p, step)) {
            want = 0;
            for (int64_t r : kRows)
                want += zt::prune_count(zt::prune_sparsity_at(p, step), r) * kDim;
        }
        EXPECT_EQ(j["pruning"]["pruned"].get<int64_t>(), want) << line;
        ++lines;
    }
    EXPECT_EQ(lines, 7);
}

TEST_F(PruneRowsCli, CheckpointsResumeBitForBitAndOnAnotherLayout) {
    nlohmann::json full = config(7, 1);
    full["checkpoint"] = {{"interval_steps", 3}};
    ASSERT_EQ(train_run(full, "full", "", 1).code, 0);
    const RunLog ref = read_run("full");
    // Same layout: the same bits (the row counts come back from the checkpoint; without them
    // the update after step 4 would choose from the last 1 step's counts only).
    nlohmann::json a = config(3, 1), b = config(7, 1);
    a["checkpoint"] = b["checkpoint"] = {{"interval_steps", 3}};
    ASSERT_EQ(train_run(a, "same", "", 1).code, 0);
    const CommandResult r = train_run(b, "same", "--resume", 1);
    ASSERT_EQ(r.code, 0) << r.output;
    const RunLog same = read_run("same");
    EXPECT_EQ(same.loss, ref.loss);
    EXPECT_EQ(same.weights, ref.weights);
    // dp 1 -> dp 2 at ZeRO stage 3: the equivalence rule's tolerance, the same zero rows.
    a = config(3, 1);
    b = config(7, 2);
    a["checkpoint"] = b["checkpoint"] = {{"interval_steps", 3}};
    b["zero_optimization"] = {{"stage", 3}};
    ASSERT_EQ(train_run(a, "other", "", 1).code, 0);
    const CommandResult r2 = train_run(b, "other", "--resume", 2);
    ASSERT_EQ(r2.code, 0) << r2.output;
    expect_close(read_run("other"), ref, "dp1 -> dp2 stage 3");
    EXPECT_EQ(zero_rows("other"), zero_rows("full"));
}

TEST_F(PruneRowsCli, WhatRowsPruningCannotDoIsRefusedBeforeAnyWork) {
    struct Case {
        nlohmann::json change;
        const char* says;
    };
    const std::vector<Case> cases = {
        {{{"compression", {{"pruning", {{"final_sparsity", nullptr}}}}}},
         "final_sparsity: required"},
        {{{"compression",
           {{"pruning", {{"type", "rows"}, {"final_sparsity", 0.5}, {"params", {"emb"}}}}}}},
         "not used by rows pruning"},
        {{{"embedding", {{"sharding", "row"}}}}, "is not supported yet"},
    };
    for (const Case& c : cases) {
        nlohmann::json j = config(3, 1);
        j.merge_patch(c.change);
        const CommandResult r = train_run(j, "bad", "", 1);
        EXPECT_EQ(r.code, 2) << c.change.dump() << r.output;
        EXPECT_NE(r.output.find(c.says), std::string::npos) << c.change.dump() << r.output;
        EXPECT_FALSE(fs::exists(dir_ / "bad" / "model.safetensors"));
    }
    // GPT has no tables to prune by rows.
    nlohmann::json g = tiny();
    g["compression"]["pruning"] = {{"type", "rows"}, {"final_sparsity", 0.5}};
    const CommandResult r = train_run(g, "gpt", "", 1);
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("rows pruning prunes DLRM's embedding rows"), std::string::npos)
        << r.output;
}
