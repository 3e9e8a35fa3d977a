// Pruning under tensor and pipeline parallelism as a user runs it (docs/pruning.md, "Layouts"):
// magnitude, N:M and structured pruning with parallel.tensor, parallel.pipeline (1F1B and
// interleaved) and both together prune exactly the weights one process prunes (the mask is
// computed on the whole model's view, compression/prune_view.h), report the whole model's counts,
// train like one process, and a checkpoint written with tensor parallelism resumes with the
// mask on a pipeline.
#include <gtest/gtest.h>

#include "cli/cli_fixture.h"
#include "compression/prune_mask.h"

using zt::testing::Cli;
using zt::testing::CommandResult;

namespace {

class PruningLayoutsCli : public Cli {
  protected:
    // 8 samples a step in 4 micro-batches of 2; 4 layers of d_model 16 with 4 heads.
    nlohmann::json config(int steps, const nlohmann::json& pruning, int stages, int tp,
                          const std::string& schedule = "1f1b") {
        nlohmann::json j = tiny();
        j["steps"] = steps;
        j["train_batch_size"] = 8;
        j["train_micro_batch_size_per_gpu"] = 2;
        j["data"]["builtin_tokens"] = 1 << 15;
        j["model"]["n_heads"] = 4;
        j["model"]["n_layers"] = 4;
        j["eval_interval"] = 0;
        j["optimizer"]["params"] = {{"lr", 3e-3}, {"weight_decay", 0.1}};
        j["parallel"]["pipeline"] = {{"stages", stages},
                                     {"schedule", schedule},
                                     {"virtual_stages", schedule == "interleaved" ? 2 : 1},
                                     {"micro_batches", 4}};
        if (tp > 1) j["parallel"]["tensor"] = tp;
        j["compression"]["pruning"] = pruning;
        return j;
    }
    static nlohmann::json magnitude() {
        return {{"type", "magnitude"}, {"initial_sparsity", 0.2}, {"final_sparsity", 0.5},
                {"start_step", 1},     {"end_step", 3},           {"frequency", 1}};
    }
    static nlohmann::json nm() { return {{"type", "nm"}, {"start_step", 2}}; }
    static nlohmann::json structured() {
        return {{"type", "structured"}, {"heads", 0.5},  {"channels", 0.25},
                {"start_step", 1},      {"end_step", 3}, {"frequency", 1}};
    }
    // Weights zero in one run and not in the other (the pruned weights are exactly 0).
    static int64_t zero_mismatches(const RunLog& a, const RunLog& b) {
        int64_t n = 0;
        for (size_t i = 0; i < a.weights.size(); ++i)
            n += (a.weights[i] == 0.0f) != (b.weights[i] == 0.0f);
        return n;
    }
    static int64_t zeros(const RunLog& a) {
        int64_t n = 0;
        for (float w : a.weights) n += w == 0.0f;
        return n;
    }
};

}  // namespace

TEST_F(PruningLayoutsCli, EveryLayoutPrunesTheWeightsOneProcessPrunes) {
    struct Layout {
        std::string name;
        int stages, tp;
        std::string schedule;
    };
    const std::vector<Layout> layouts = {
        {"tp2", 1, 2, "1f1b"},
        {"pp2", 2, 1, "1f1b"},
        {"tp2_pp2_interleaved", 2, 2, "interleaved"},
    };
    const std::vector<std::pair<std::string, nlohmann::json>> kinds = {
        {"magnitude", magnitude()}, {"nm", nm()}, {"structured", structured()}};
    for (const auto& [kind, pruning] : kinds) {
        ASSERT_EQ(train_run(config(4, pruning, 1, 1), kind, "", 1).code, 0) << kind;
        const RunLog ref = read_run(kind);
        ASSERT_GT(zeros(ref), 0) << kind;
        const nlohmann::json ref_last = step_lines(kind).back()["pruning"];
        for (const Layout& l : layouts) {
            const std::string run = kind + "_" + l.name;
            const CommandResult r =
                train_run(config(4, pruning, l.stages, l.tp, l.schedule), run, "", l.stages * l.tp);
            ASSERT_EQ(r.code, 0) << run << r.output;
            const RunLog got = read_run(run);
            expect_close(got, ref, run);
            EXPECT_EQ(zero_mismatches(got, ref), 0) << run;
            // The metrics count the whole model's weights, not this rank's part.
            const nlohmann::json last = step_lines(run).back()["pruning"];
            EXPECT_EQ(last["pruned"], ref_last["pruned"]) << run;
            EXPECT_DOUBLE_EQ(last["sparsity"].get<double>(), ref_last["sparsity"].get<double>())
                << run;
            if (kind == "structured") {
                EXPECT_EQ(last["heads"], ref_last["heads"]) << run;
            }
        }
    }
}

// The mask is optimizer state: written by tensor-parallel ranks, it resumes on a pipeline, and
// the run continues like the uninterrupted one, still at the final sparsity.
TEST_F(PruningLayoutsCli, ACheckpointResumesWithItsMaskOnAnotherLayout) {
    nlohmann::json full = config(5, magnitude(), 1, 1);
    full["checkpoint"] = {{"interval_steps", 3}};
    ASSERT_EQ(train_run(full, "full", "", 1).code, 0);
    nlohmann::json a = config(3, magnitude(), 1, 2), b = config(5, magnitude(), 2, 1);
    a["checkpoint"] = b["checkpoint"] = {{"interval_steps", 3}};
    ASSERT_EQ(train_run(a, "moved", "", 2).code, 0);
    const CommandResult r = train_run(b, "moved", "--resume", 2);
    ASSERT_EQ(r.code, 0) << r.output;
    const RunLog ref = read_run("full"), got = read_run("moved");
    expect_close(got, ref, "tp2 -> pp2");
    EXPECT_EQ(zero_mismatches(got, ref), 0);
    const nlohmann::json last = step_lines("moved").back()["pruning"];
    EXPECT_EQ(last["pruned"], step_lines("full").back()["pruning"]["pruned"]);
}
