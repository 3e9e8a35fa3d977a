// Pipeline parallelism as a user runs it (docs/pipeline-parallel.md): "parallel": {"pipeline":
// {...}} trains a GPT like one process with the same samples per step (losses and the exported
// weights within fp32 tolerance), on threads and under mpirun (pp 2, and tp 2 x pp 2 on 4
// processes), alone and with dp and tp; the weights file has the one-process names and shapes;
// the metrics carry the measured bubble; a stage that skips a send ends the job with the
// watchdog's report; what this version does not pipeline is refused with exit code 2 before
// any work.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>

#include "cli/cli_fixture.h"
#include "util/error.h"

using zt::testing::Cli;
using zt::testing::CommandResult;
namespace fs = std::filesystem;

namespace {

using zt::testing::kMpiEnv;

class PipelineCli : public Cli {
  protected:
    // 8 samples a step: 4 micro-batches of 2 on one dp rank, or of 1 on two; 4 layers.
    nlohmann::json config(int steps, int dp, const nlohmann::json& pipeline, int tp = 1) {
        nlohmann::json j = tiny();
        j["steps"] = steps;
        j["train_batch_size"] = 8;
        j["train_micro_batch_size_per_gpu"] = 2 / dp;
        j["gradient_clipping"] = 0.5;
        j["data"]["builtin_tokens"] = 1 << 15;
        j["model"]["n_heads"] = 4;
        j["model"]["n_layers"] = 4;
        j["eval_interval"] = steps;  // evaluation through the pipeline at the end
        j["optimizer"]["params"] = {{"lr", 3e-3}, {"weight_decay", 0.1}};
        if (!pipeline.is_null()) j["parallel"]["pipeline"] = pipeline;
        if (tp > 1) j["parallel"]["tensor"] = tp;
        return j;
    }
    nlohmann::json one() { return nlohmann::json{{"stages", 1}, {"micro_batches", 4}}; }
    nlohmann::json pipe(int stages, const std::string& schedule, int v = 1) {
        return {{"stages", stages},
                {"schedule", schedule},
                {"virtual_stages", v},
                {"micro_batches", 4}};
    }
};

}  // namespace

TEST_F(PipelineCli, TrainsLikeOneProcessWithEachScheduleAndMesh) {
    ASSERT_EQ(train_run(config(5, 1, one()), "one", "", 1).code, 0);
    const RunLog ref = read_run("one");
    ASSERT_EQ(ref.loss.size(), 5u);
    struct Case {
        std::string name;
        nlohmann::json cfg;
        int ranks;
    };
    const std::vector<Case> cases = {
        {"pp2_1f1b", config(5, 1, pipe(2, "1f1b")), 2},
        {"pp2_zb", config(5, 1, pipe(2, "zero_bubble")), 2},
        {"pp2_interleaved", config(5, 1, pipe(2, "interleaved", 2)), 2},
        {"pp4_gpipe", config(5, 1, pipe(4, "gpipe")), 4},
        {"dp2_pp2", config(5, 2, pipe(2, "1f1b")), 4},
        {"tp2_pp2", config(5, 1, pipe(2, "1f1b"), 2), 4},
    };
    for (const Case& c : cases) {
        const CommandResult r = train_run(c.cfg, c.name, "", c.ranks);
        ASSERT_EQ(r.code, 0) << c.name << r.output;
        expect_close(read_run(c.name), ref, c.name);
    }
    // The metrics line carries the measured bubble beside the formula's.
    std::ifstream in(dir_ / "pp2_1f1b" / "metrics.jsonl");
    std::string line;
    ASSERT_TRUE(std::getline(in, line));
    const nlohmann::json first = nlohmann::json::parse(line);
    ASSERT_TRUE(first.contains("pipeline")) << line;
    EXPECT_DOUBLE_EQ(first["pipeline"]["bubble_formula"].get<double>(), 0.25);  // (p-1)/m
    EXPECT_GT(first["pipeline"]["bubble"].get<double>(), 0.0);
}

TEST_F(PipelineCli, UnderMpirunLikeOnThreads) {
    nlohmann::json j = config(3, 1, pipe(2, "1f1b"));
    ASSERT_EQ(train_run(j, "threads", "", 2).code, 0);
    j["comm"] = {{"backend", "mpi"}};
    const std::string cfg = write_config(j, "mpi.json");
    const CommandResult r = zt::testing::run_command(
        zt::str_cat(kMpiEnv, "timeout 120 mpirun --oversubscribe --mca btl self,vader -np 2 ",
                    ZT_BINARY, " train ", cfg, " --quiet --run-dir ", (dir_ / "mpi").string()));
    ASSERT_EQ(r.code, 0) << r.output;
    const RunLog a = read_run("threads"), b = read_run("mpi");
    EXPECT_EQ(a.loss, b.loss);
    EXPECT_EQ(a.weights, b.weights);
}

// tp 2 x pp 2 as 4 processes (oversubscribed): trains like one process, and like 4 threads to
// the bit. Zero bubble, so that its deferred weight-gradient passes run between MPI's
// nonblocking sends too (the 2-rank case above is 1F1B).
TEST_F(PipelineCli, TensorAndPipelineUnderMpirunOnFourRanksTrainLikeOneProcess) {
    ASSERT_EQ(train_run(config(3, 1, one()), "one", "", 1).code, 0);
    nlohmann::json j = config(3, 1, pipe(2, "zero_bubble"), 2);
    const CommandResult t = train_run(j, "threads", "", 4);
    ASSERT_EQ(t.code, 0) << t.output;
    j["comm"] = {{"backend", "mpi"}};
    const CommandResult m = mpirun_train(j, "mpi", 4);
    ASSERT_EQ(m.code, 0) << m.output;
    const RunLog ref = read_run("one"), got = read_run("mpi");
    ASSERT_EQ(ref.loss.size(), 3u);
    expect_close(got, ref, "tp2_pp2 zero_bubble, mpirun -np 4");
    EXPECT_EQ(got.loss, read_run("threads").loss);
    EXPECT_EQ(got.weights, read_run("threads").weights);
}

namespace {

// Stage 0 skipped its send of micro-batch 2's activations. Whichever stage's watchdog fires
// first (a race between two threads or processes) must name that wait and the other stage's
// place in the schedule: stage 1 waits for the activations itself, or stage 0 waits for
// gradients that stage 1 cannot send because it waits for those activations.
bool reports_the_skipped_send(const std::string& out) {
    auto has = [&](const char* s) { return out.find(s) != std::string::npos; };
    const bool by_stage1 = has("pipeline watchdog: stage 1 (forward of micro-batch 2) waits for "
                               "the activations of micro-batch 2 from stage 0") &&
                           has("stage 0 is in backward of micro-batch");
    const bool by_stage0 = has("pipeline watchdog: stage 0 (backward of micro-batch 2) waits for "
                               "the gradients of micro-batch 2 from stage 1") &&
                           has("stage 1 is in forward of micro-batch 2, waiting for the "
                               "activations of micro-batch 2 from stage 0");
    return by_stage1 || by_stage0;
}

}  // namespace

TEST_F(PipelineCli, AStageThatSkipsASendEndsTheJobWithTheWatchdogsReport) {
    nlohmann::json j = config(2, 1, pipe(2, "1f1b"));
    j["comm"]["timeout_s"] = 2;
    const CommandResult r = zt::testing::run_command(
        zt::str_cat("ZT_FAULT_SKIP_SEND=0:2 timeout 60 ", ZT_BINARY, " train ", write_config(j),
                    " --quiet --ranks 2 --run-dir ", (dir_ / "fault").string()));
    EXPECT_NE(r.code, 0) << r.output;
    EXPECT_TRUE(reports_the_skipped_send(r.output)) << r.output;
    // Under mpirun the job ends with the report too, not a hang (the pending receives are
    // abandoned as the communicators go).
    j["comm"]["backend"] = "mpi";
    const CommandResult m = zt::testing::run_command(zt::str_cat(
        kMpiEnv, "ZT_FAULT_SKIP_SEND=0:2 timeout 60 mpirun --oversubscribe --mca btl self,vader ",
        "-np 2 ", ZT_BINARY, " train ", write_config(j, "mpi.json"), " --quiet --run-dir ",
        (dir_ / "fault_mpi").string()));
    EXPECT_NE(m.code, 0) << m.output;
    EXPECT_NE(m.code, 124) << "the job hung: " << m.output;
    EXPECT_TRUE(reports_the_skipped_send(m.output)) << m.output;
}

// Checkpoints carry each stage's parameters: one written on any mesh resumes on any other
// (stages, dp, tp, ZeRO, one process) and continues the uninterrupted run's trajectory.
TEST_F(PipelineCli, CheckpointsResumeOnAnyMesh) {
    nlohmann::json full = config(6, 1, one());
    full["checkpoint"] = {{"interval_steps", 3}};
    ASSERT_EQ(train_run(full, "full", "", 1).code, 0);
    const RunLog ref = read_run("full");
    struct Mesh {
        int dp, tp, pp, zero;
    };
    auto cfg = [&](int steps, const Mesh& m) {
        nlohmann::json j = config(steps, m.dp, m.pp > 1 ? pipe(m.pp, "1f1b") : one(), m.tp);
        j["checkpoint"] = {{"interval_steps", 3}};
        j["zero_optimization"] = {{"stage", m.zero}};
        return j;
    };
    const std::vector<std::pair<Mesh, Mesh>> cases = {{{1, 1, 2, 0}, {1, 1, 2, 0}},
                                                      {{1, 1, 2, 0}, {1, 1, 1, 0}},
                                                      {{1, 1, 1, 0}, {1, 1, 4, 0}},
                                                      {{2, 1, 2, 1}, {1, 2, 2, 0}},
                                                      {{1, 2, 2, 0}, {2, 1, 2, 1}}};
    for (const auto& [from, to] : cases) {
        const std::string run =
            zt::str_cat("dp", from.dp, "tp", from.tp, "pp", from.pp, "s", from.zero, "_to_dp",
                        to.dp, "tp", to.tp, "pp", to.pp, "s", to.zero);
        ASSERT_EQ(train_run(cfg(3, from), run, "", from.dp * from.tp * from.pp).code, 0) << run;
        const CommandResult r = train_run(cfg(6, to), run, "--resume", to.dp * to.tp * to.pp);
        ASSERT_EQ(r.code, 0) << run << r.output;
        expect_close(read_run(run), ref, run);
    }
    const CommandResult inspect = zt::testing::run_zerotrain(
        "checkpoint inspect " + (dir_ / "dp1tp1pp2s0_to_dp1tp1pp2s0").string());
    EXPECT_EQ(inspect.code, 0) << inspect.output;
    EXPECT_NE(inspect.output.find("x pp 2"), std::string::npos) << inspect.output;
    // export consolidates the stages' shards into the one-process weights file: the same bytes
    // as the run's own final weights, gathered over the stages.
    const std::string run = (dir_ / "dp1tp2pp2s0_to_dp2tp1pp2s1").string();
    const std::string out = (dir_ / "export.safetensors").string();
    const CommandResult ex =
        zt::testing::run_zerotrain("export " + write_config(cfg(6, {2, 1, 2, 1}), "export.json") +
                                   " --from " + run + "/checkpoints/step_00000006 --out " + out);
    ASSERT_EQ(ex.code, 0) << ex.output;
    auto bytes = [](const std::string& path) {
        std::ifstream f(path, std::ios::binary);
        return std::string(std::istreambuf_iterator<char>(f), {});
    };
    EXPECT_EQ(bytes(out), bytes(run + "/model.safetensors"));
}

TEST_F(PipelineCli, InitFromAndOffloadOnStages) {
    ASSERT_EQ(train_run(config(3, 1, one()), "source", "", 1).code, 0);
    const std::string weights = (dir_ / "source" / "model.safetensors").string();
    nlohmann::json a = config(3, 1, one());
    a["init_from"] = weights;
    ASSERT_EQ(train_run(a, "one", "", 1).code, 0);
    nlohmann::json b = config(3, 1, pipe(2, "zero_bubble"));
    b["init_from"] = weights;
    CommandResult r = train_run(b, "staged", "", 2);
    ASSERT_EQ(r.code, 0) << r.output;
    expect_close(read_run("staged"), read_run("one"), "init_from into 2 stages");
    // The optimizer offloaded on each stage: bit for bit like in memory.
    nlohmann::json off = config(3, 1, pipe(2, "1f1b"));
    ASSERT_EQ(train_run(off, "memory", "", 2).code, 0);
    off["zero_optimization"] = {{"stage", 1}, {"offload_optimizer", {{"device", "cpu"}}}};
    r = train_run(off, "offloaded", "", 2);
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_EQ(read_run("offloaded").loss, read_run("memory").loss);
    EXPECT_EQ(read_run("offloaded").weights, read_run("memory").weights);
}

// `zerotrain estimate` of a pipeline config: the most loaded stage's parameters, the formula's.
TEST_F(PipelineCli, EstimateGivesTheMostLoadedStagesParameters) {
    nlohmann::json j = config(2, 1, pipe(2, "1f1b"));
    j["parallel"]["pipeline"]["partition"] = {3, 1};
    const int64_t V = j["model"]["vocab_size"], T = j["model"]["seq_len"],
                  C = j["model"]["d_model"];
    const int64_t block = 12 * C * C + 13 * C;
    const CommandResult r =
        zt::testing::run_zerotrain("estimate " + write_config(j, "e.json") + " --json", false);
    ASSERT_EQ(r.code, 0) << r.output;
    const nlohmann::json e = nlohmann::json::parse(r.output);
    EXPECT_EQ(e["pipeline"], 2);
    // Stage 0: wte, wpe and 3 blocks; stage 1: 1 block, ln_f and the head's copy of wte.
    EXPECT_EQ(e["param_count"].get<int64_t>(),
              std::max(V * C + T * C + 3 * block, block + 2 * C + V * C));
}

TEST_F(PipelineCli, WhatDoesNotPipelineIsRefusedBeforeAnyWork) {
    nlohmann::json j = config(2, 1, pipe(8, "1f1b"));
    CommandResult r = train_run(j, "deep", "", 8);
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("8 stages need at least 8 blocks, the model has 4"), std::string::npos)
        << r.output;
}
