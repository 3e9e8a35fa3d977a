// Tensor parallelism as a user runs it (docs/parallel.md): "parallel": {"tensor": t} trains a GPT
// like one process (losses and the exported weights within fp32 tolerance; the split reorders
// sums, so not to the bit), alone and with data parallelism and ZeRO, on threads and under
// mpirun; its weights file has the one-process names and shapes; init_from loads such a file
// into any split; checkpoints written on one mesh resume on another (tp 1 <-> 2 <-> 4, dp x tp,
// ZeRO stages) and continue the same trajectory; configs that cannot split are refused with exit
// code 2 before any work.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "cli/cli_fixture.h"
#include "util/error.h"

using zt::testing::Cli;
using zt::testing::CommandResult;
namespace fs = std::filesystem;

namespace {

using zt::testing::kMpiEnv;

class TensorParallelCli : public Cli {
  protected:
    // 4 samples a step over dp ranks; 4 heads and a vocabulary of 64 split over 1, 2 or 4.
    nlohmann::json config(int steps, int dp, int tp, int stage = 0) {
        nlohmann::json j = tiny();
        j["steps"] = steps;
        j["train_batch_size"] = 4;
        j["train_micro_batch_size_per_gpu"] = 4 / dp;
        j["gradient_clipping"] = 0.5;
        j["data"]["builtin_tokens"] = 1 << 15;
        j["model"]["n_heads"] = 4;
        j.erase("eval_interval");
        j["optimizer"]["params"] = {{"lr", 3e-3}, {"weight_decay", 0.1}};
        j["zero_optimization"] = {{"stage", stage}};
        if (tp > 1) j["parallel"] = {{"tensor", tp}};
        return j;
    }
    CommandResult train(const nlohmann::json& j, const std::string& run, const std::string& args,
                        int ranks = 1) {
        return train_run(j, run, args, ranks);
    }
};

}  // namespace

TEST_F(TensorParallelCli, TrainsLikeOneProcessOnEveryMesh) {
    ASSERT_EQ(train(config(6, 1, 1), "one", "").code, 0);
    const RunLog ref = read_run("one");
    ASSERT_EQ(ref.loss.size(), 6u);
    EXPECT_LT(ref.loss.back(), ref.loss.front());
    struct Case {
        int dp, tp, stage;
    };
    for (const Case c : {Case{1, 2, 0}, Case{1, 4, 0}, Case{2, 2, 1}, Case{2, 2, 3}}) {
        const std::string run = zt::str_cat("dp", c.dp, "_tp", c.tp, "_s", c.stage);
        CommandResult r = train(config(6, c.dp, c.tp, c.stage), run, "", c.dp * c.tp);
        ASSERT_EQ(r.code, 0) << run << r.output;
        expect_close(read_run(run), ref, run);
        // And with sequence parallelism.
        nlohmann::json sp = config(6, c.dp, c.tp, c.stage);
        sp["parallel"]["sequence_parallel"] = true;
        r = train(sp, run + "_sp", "", c.dp * c.tp);
        ASSERT_EQ(r.code, 0) << run << r.output;
        expect_close(read_run(run + "_sp"), ref, run + "_sp");
    }
}

TEST_F(TensorParallelCli, UnderMpirunLikeOnThreads) {
    nlohmann::json j = config(4, 1, 2);
    ASSERT_EQ(train(j, "threads", "", 2).code, 0);
    j["comm"] = {{"backend", "mpi"}};
    const std::string cfg = write_config(j, "mpi.json");
    const CommandResult r = zt::testing::run_command(
        zt::str_cat(kMpiEnv, "timeout 120 mpirun --oversubscribe --mca btl self,vader -np 2 ",
                    ZT_BINARY, " train ", cfg, " --quiet --run-dir ", (dir_ / "mpi").string()));
    ASSERT_EQ(r.code, 0) << r.output;
    const RunLog a = read_run("threads"), b = read_run("mpi");
    // The same fixed-order reductions on either backend: the same bits.
    EXPECT_EQ(a.loss, b.loss);
    EXPECT_EQ(a.weights, b.weights);
}

TEST_F(TensorParallelCli, CheckpointsResumeOnAnyMesh) {
    nlohmann::json full = config(8, 1, 1);
    full["checkpoint"] = {{"interval_steps", 4}};
    ASSERT_EQ(train(full, "full", "").code, 0);
    const RunLog ref = read_run("full");
    struct Mesh {
        int dp, tp, stage;
    };
    // Written on `from` to step 4, resumed on `to` to step 8.
    const std::vector<std::pair<Mesh, Mesh>> cases = {{{1, 2, 0}, {1, 2, 0}},
                                                      {{1, 2, 0}, {1, 1, 0}},
                                                      {{1, 1, 0}, {1, 2, 0}},
                                                      {{1, 4, 0}, {2, 2, 2}},
                                                      {{2, 2, 3}, {1, 4, 0}}};
    for (const auto& [from, to] : cases) {
        const std::string run = zt::str_cat("dp", from.dp, "tp", from.tp, "s", from.stage, "_to_dp",
                                            to.dp, "tp", to.tp, "s", to.stage);
        nlohmann::json first = config(4, from.dp, from.tp, from.stage);
        first["checkpoint"] = {{"interval_steps", 4}};
        ASSERT_EQ(train(first, run, "", from.dp * from.tp).code, 0) << run;
        nlohmann::json second = config(8, to.dp, to.tp, to.stage);
        second["checkpoint"] = {{"interval_steps", 4}};
        const CommandResult r = train(second, run, "--resume", to.dp * to.tp);
        ASSERT_EQ(r.code, 0) << run << r.output;
        expect_close(read_run(run), ref, run);
    }
    // The checkpoint says how it was split.
    const CommandResult inspect = zt::testing::run_zerotrain(
        "checkpoint inspect " + (dir_ / "dp1tp2s0_to_dp1tp2s0").string());
    EXPECT_EQ(inspect.code, 0) << inspect.output;
    EXPECT_NE(inspect.output.find("dp 1 x tp 2 x pp 1"), std::string::npos) << inspect.output;
}

TEST_F(TensorParallelCli, InitFromAWeightsFileIntoAnySplit) {
    ASSERT_EQ(train(config(3, 1, 1), "source", "").code, 0);
    const std::string weights = (dir_ / "source" / "model.safetensors").string();
    nlohmann::json one = config(3, 1, 1);
    one["init_from"] = weights;
    ASSERT_EQ(train(one, "one", "").code, 0);
    nlohmann::json split = config(3, 1, 2);
    split["init_from"] = weights;
    const CommandResult r = train(split, "split", "", 2);
    ASSERT_EQ(r.code, 0) << r.output;
    expect_close(read_run("split"), read_run("one"), "init_from into tp 2");
}

TEST_F(TensorParallelCli, ConfigsThatCannotSplitAreRefused) {
    nlohmann::json heads = config(2, 1, 4);
    heads["model"]["n_heads"] = 2;
    CommandResult r = train(heads, "heads", "", 4);
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("parallel.tensor = 4 must divide model.n_heads = 2"), std::string::npos)
        << r.output;
    nlohmann::json vocab = config(2, 1, 2);
    vocab["model"]["vocab_size"] = 63;
    r = train(vocab, "vocab", "", 2);
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("must divide model.vocab_size = 63"), std::string::npos) << r.output;
    nlohmann::json sp = config(2, 1, 1);
    sp["parallel"] = {{"sequence_parallel", true}};
    r = train(sp, "sp", "");
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("parallel.sequence_parallel: splits the rows of a tensor-parallel "
                            "group; it needs parallel.tensor > 1"),
              std::string::npos)
        << r.output;
    // Sequence parallelism splits a micro-batch's B x T rows: one sample of 18 tokens over 4 ranks
    // does not divide.
    nlohmann::json rows = config(2, 1, 4);
    rows["parallel"]["sequence_parallel"] = true;
    rows["train_batch_size"] = 1;
    rows["train_micro_batch_size_per_gpu"] = 1;
    rows["model"]["seq_len"] = 18;
    r = train(rows, "rows", "", 4);
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("must be divisible by parallel.tensor = 4"), std::string::npos)
        << r.output;
}

// `zerotrain estimate --tensor T`: one rank's parameters, the split ones divided by T (wte, the
// blocks' weights and column biases), the rest whole; and the same from the config's
// parallel.tensor.
TEST_F(TensorParallelCli, EstimateGivesOnePartsParameters) {
    const nlohmann::json j = config(2, 1, 1);
    const std::string cfg = write_config(j, "estimate.json");
    const int64_t V = j["model"]["vocab_size"], T = j["model"]["seq_len"],
                  C = j["model"]["d_model"], L = j["model"]["n_layers"];
    for (const int64_t t : {1, 2, 4}) {
        const CommandResult r = zt::testing::run_zerotrain(
            zt::str_cat("estimate ", cfg, " --json --tensor ", t), /*with_stderr=*/false);
        ASSERT_EQ(r.code, 0) << r.output;
        const nlohmann::json e = nlohmann::json::parse(r.output);
        EXPECT_EQ(e["tensor"], t);
        EXPECT_EQ(e["param_count"].get<int64_t>(),
                  V * C / t + T * C + L * (12 * C * C / t + 7 * C / t + 6 * C) + 2 * C)
            << "tensor " << t;
    }
    const CommandResult r = zt::testing::run_zerotrain(
        "estimate " + write_config(config(2, 1, 2), "tp2.json") + " --json", false);
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_EQ(nlohmann::json::parse(r.output)["tensor"], 2);
}

// A model without a tensor-parallel split (DLRM) is refused by name before any work.
TEST_F(TensorParallelCli, DlrmIsRefused) {
    const nlohmann::json j = {{"train_micro_batch_size_per_gpu", 8},
                              {"steps", 2},
                              {"optimizer", {{"type", "SGD"}, {"params", {{"lr", 0.1}}}}},
                              {"model",
                               {{"type", "dlrm"},
                                {"table_rows", {100, 50}},
                                {"embedding_dim", 8},
                                {"bottom_mlp", {16, 8}},
                                {"top_mlp", {16}}}},
                              {"data", {{"type", "synthetic"}, {"records", 64}}},
                              {"parallel", {{"tensor", 2}}},
                              {"threads", 1}};
    const CommandResult r = train(j, "dlrm", "", 2);
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("parallel.tensor = 2: DLRM has no tensor-parallel split"),
              std::string::npos)
        << r.output;
}

// The optimizer offloaded under tensor parallelism: each rank's part on the tier (its own swap
// file), bit for bit like the same mesh in memory.
TEST_F(TensorParallelCli, OffloadedLikeInMemory) {
    const nlohmann::json plain = config(4, 2, 2, 2);
    ASSERT_EQ(train(plain, "plain", "", 4).code, 0);
    for (const std::string device : {"cpu", "nvme"}) {
        nlohmann::json j = plain;
        fs::create_directories(dir_ / "swap");
        j["zero_optimization"]["offload_optimizer"] = {{"device", device},
                                                       {"nvme_path", (dir_ / "swap").string()}};
        const CommandResult r = train(j, device, "", 4);
        ASSERT_EQ(r.code, 0) << device << r.output;
        const RunLog a = read_run("plain"), b = read_run(device);
        EXPECT_EQ(a.loss, b.loss) << device;
        EXPECT_EQ(a.weights, b.weights) << device;
    }
}
