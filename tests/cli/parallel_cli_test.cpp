// Training on many ranks as a user runs it: `zerotrain train --ranks N` (threads) and
// `mpirun -np N zerotrain train` (processes). The equivalence rule (DESIGN.md) on the loss
// trajectory of 20 steps against one process with accumulation N x G, for every ZeRO stage, with
// accumulation, clipping, bf16 and fp16 in the matrix; bit for bit between the stages that share
// one reduction schedule. Bad input ends every rank with a named error and exit code 2, no hang.
#include <gtest/gtest.h>

#include <cmath>

#include "checkpoint/safetensors.h"
#include "cli/cli_fixture.h"

using zt::testing::Cli;
using zt::testing::CommandResult;
namespace fs = std::filesystem;

namespace {

constexpr int kSteps = 20;
using zt::testing::kMpiEnv;
constexpr const char* kMpirun = "timeout 120 mpirun --oversubscribe --mca btl self,vader ";

struct Losses {
    std::vector<double> loss;
    std::vector<double> eval;
};

Losses read_losses(const std::string& run_dir) {
    Losses l;
    std::ifstream f(run_dir + "/metrics.jsonl");
    std::string line;
    while (std::getline(f, line)) {
        auto j = nlohmann::json::parse(line);
        if (j.contains("eval_loss"))
            l.eval.push_back(j["eval_loss"]);
        else
            l.loss.push_back(j["loss"]);
    }
    return l;
}

double max_rel_diff(const std::vector<double>& a, const std::vector<double>& b) {
    double worst = 0;
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
        worst = std::max(worst, std::fabs(a[i] - b[i]) / std::fabs(b[i]));
    return worst;
}

class Parallel : public Cli {
protected:
    // micro-batch 2 per rank; accumulation G; `ranks` data-parallel ranks.
    nlohmann::json config(int ranks, int G, const std::string& precision, int stage) {
        nlohmann::json j = tiny();
        j["steps"] = kSteps;
        j["steps_per_print"] = 5;
        j["gradient_accumulation_steps"] = G;
        j["train_batch_size"] = 2 * G * ranks;
        j["gradient_clipping"] = 0.5;
        j["optimizer"]["params"]["lr"] = 3e-3;
        j["data"]["builtin_tokens"] = 1 << 15;
        j["eval_interval"] = 10;
        j["eval_iters"] = 3;
        j["zero_optimization"] = {{"stage", stage}, {"reduce_bucket_size", 2000},
                                  {"allgather_bucket_size", 3000},
                                  {"stage3_param_persistence_threshold", 100},
                                  {"stage3_prefetch_bucket_size", 4000}};
        if (precision == "bf16") j["bf16"] = {{"enabled", true}};
        if (precision == "fp16") j["fp16"] = {{"enabled", true}, {"initial_scale_power", 12}};
        return j;
    }
    // Runs the config and returns its losses; `launcher` is "" (one process), "--ranks N" or an
    // mpirun prefix.
    Losses train(const nlohmann::json& j, const std::string& name, const std::string& how) {
        const std::string cfg = write_config(j, name + ".json");
        const std::string rd = (dir_ / name).string();
        CommandResult r;
        if (how.rfind("mpi", 0) == 0)
            r = zt::testing::run_command(std::string(kMpiEnv) + kMpirun + "-np " + how.substr(3) +
                                         " " + ZT_BINARY + " train " + cfg + " --quiet --run-dir " +
                                         rd);
        else
            r = zt::testing::run_zerotrain("train " + cfg + " --quiet --run-dir " + rd + " " + how);
        EXPECT_EQ(r.code, 0) << name << ": " << r.output;
        Losses l = read_losses(rd);
        EXPECT_EQ(l.loss.size(), static_cast<size_t>(kSteps)) << name;
        return l;
    }
    // The matrix at one rank count: every stage against the one-process reference.
    void check_stages(int ranks, int G, const std::string& precision, const std::string& how) {
        const double tol = precision == "fp32" ? 1e-4 : 1e-2;
        const Losses ref = train(config(1, G * ranks, precision, 0), "ref", "");
        ASSERT_LT(ref.loss.back(), ref.loss.front()) << "the reference does not learn";
        Losses by_stage[4];
        for (int stage = 0; stage <= 3; ++stage) {
            const std::string name = precision + "_stage" + std::to_string(stage);
            by_stage[stage] = train(config(ranks, G, precision, stage), name, how);
            const double d = max_rel_diff(by_stage[stage].loss, ref.loss);
            std::printf("[ equiv ] %s, %s ranks %d, stage %d: max relative loss difference %.3g\n",
                        precision.c_str(), how.c_str(), ranks, stage, d);
            EXPECT_LE(d, tol) << name;
            EXPECT_LE(max_rel_diff(by_stage[stage].eval, ref.eval), tol) << name << " eval";
            ASSERT_EQ(by_stage[stage].eval.size(), 2u) << name;
        }
        EXPECT_EQ(by_stage[1].loss, by_stage[0].loss) << "stage 1 vs 0: one reduction schedule";
        EXPECT_EQ(by_stage[3].loss, by_stage[2].loss) << "stage 3 vs 2: one reduction schedule";
        if (G == 1) {
            EXPECT_EQ(by_stage[2].loss, by_stage[0].loss) << "stage 2 vs 0 at G = 1";
        }
    }
};

}  // namespace

TEST_F(Parallel, ThreadRanksFp32AccumulationClipping) { check_stages(3, 2, "fp32", "--ranks 3"); }

TEST_F(Parallel, MpiTwoRanksFp32AccumulationClipping) { check_stages(2, 2, "fp32", "mpi2"); }

TEST_F(Parallel, MpiFourRanksBf16) { check_stages(4, 1, "bf16", "mpi4"); }

TEST_F(Parallel, MpiTwoRanksFp16) { check_stages(2, 1, "fp16", "mpi2"); }

TEST_F(Parallel, SameWeightsFromThreadsAndMpiAndEveryStage) {
    // The exported weights are the consolidated whole at every stage, and the two backends
    // compute the same bits.
    std::vector<std::vector<float>> weights;
    for (const std::string how : {"--ranks 2", "mpi2"})
        for (int stage : {0, 3}) {
            const std::string name = "w" + std::to_string(weights.size());
            train(config(2, 1, "bf16", stage), name, how);
            zt::SafetensorsFile f((dir_ / name / "model.safetensors").string());
            std::vector<float> w(3 * 16 * 16);
            f.read_f32("transformer.h.0.attn.c_attn.weight", w.data(), static_cast<int64_t>(w.size()));
            weights.push_back(w);
        }
    for (size_t i = 1; i < weights.size(); ++i) EXPECT_EQ(weights[i], weights[0]) << i;
}

TEST_F(Parallel, RankCountThatDoesNotFitTheBatchStopsEveryRank) {
    nlohmann::json j = config(2, 1, "fp32", 1);  // train_batch_size 4 = 2 x 1 x 2
    const std::string cfg = write_config(j);
    CommandResult r = zt::testing::run_command(std::string(kMpiEnv) + kMpirun + "-np 3 " +
                                               ZT_BINARY + " train " + cfg + " --run-dir " +
                                               (dir_ / "run").string());
    EXPECT_EQ(r.code, 2) << r.output;  // not 124: timeout's code for a hang
    EXPECT_NE(r.output.find("this run has 3 ranks"), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(dir_ / "run"));
    r = zt::testing::run_zerotrain("train " + cfg + " --ranks 3 --run-dir " + (dir_ / "run").string());
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("this run has 3 ranks"), std::string::npos) << r.output;
}

TEST_F(Parallel, ConfigsThatDifferAcrossRanksStopEveryRank) {
    nlohmann::json j = config(2, 1, "fp32", 2);
    const std::string cfg = write_config(j);
    const std::string zt = std::string(ZT_BINARY) + " train " + cfg + " --run-dir " +
                           (dir_ / "run").string();
    CommandResult r = zt::testing::run_command(std::string(kMpiEnv) + kMpirun + "-np 1 " + zt +
                                               " : -np 1 " + zt + " --set seed=7");
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("the config differs across ranks: rank(s) 1"), std::string::npos)
        << r.output;
    // One rank's config invalid (a bad value only there): every rank stops, the bad one says why.
    r = zt::testing::run_command(std::string(kMpiEnv) + kMpirun + "-np 1 " + zt + " : -np 1 " + zt +
                                 " --set zero_optimization.stage=5");
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("zero_optimization.stage"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("the config is invalid on rank(s) 1"), std::string::npos) << r.output;
}

TEST_F(Parallel, MeshThatDoesNotDivideTheWorldIsNamed) {
    nlohmann::json j = config(2, 1, "fp32", 0);
    j["parallel"] = {{"tensor", 3}};
    CommandResult r = zt::testing::run_zerotrain("train " + write_config(j) + " --ranks 2");
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("world size 2 is not divisible by parallel.tensor (3)"),
              std::string::npos)
        << r.output;
    j["parallel"] = {{"tensor", 1}, {"pipeline", 3}};
    r = zt::testing::run_zerotrain("train " + write_config(j) + " --ranks 2");
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("parallel.pipeline (3)"), std::string::npos) << r.output;
}

TEST_F(Parallel, FailureOfOneRankEndsTheJob) {
    // Rank 1 alone gets a memory budget too small to train (--memory-budget is not part of the
    // config the ranks agree on): it fails once training has started, and the job ends with its
    // message instead of leaving rank 0 waiting in a collective.
    nlohmann::json j = config(2, 1, "fp32", 3);
    const std::string zt = std::string(ZT_BINARY) + " train " + write_config(j) +
                           " --quiet --run-dir " + (dir_ / "run").string();
    CommandResult r = zt::testing::run_command(std::string(kMpiEnv) + kMpirun + "-np 1 " + zt +
                                               " : -np 1 " + zt + " --memory-budget 20KiB");
    EXPECT_NE(r.code, 0) << r.output;
    EXPECT_NE(r.code, 124) << "the job hung: " << r.output;
    EXPECT_NE(r.output.find("rank 1: out of memory"), std::string::npos) << r.output;
}
