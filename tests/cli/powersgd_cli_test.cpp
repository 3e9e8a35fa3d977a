// PowerSGD gradient compression as a user runs it (docs/compression.md):
// "compression": {"gradients": {"type": "powersgd", "rank": r}}. It trains near the uncompressed
// loss at every ZeRO stage, threads and mpirun rebuild the same bits, Q and the residuals resume
// bit for bit, and bad keys are refused before the first step. The algorithm itself is checked
// against its definition in tests/parallel/powersgd_transport_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "cli/cli_fixture.h"

using zt::testing::Cli;
using zt::testing::CommandResult;
namespace fs = std::filesystem;

namespace {

class PowerSgdCli : public Cli {
  protected:
    // 8 samples a step over 2 ranks, 2 micro-steps each; 2 layers of d_model 32 (matrices worth
    // compressing at rank 4); buckets of 3000 elements.
    nlohmann::json config(int steps, int stage, bool powersgd) {
        nlohmann::json j = tiny();
        j["steps"] = steps;
        j["train_batch_size"] = 8;
        j["gradient_accumulation_steps"] = 2;
        j["train_micro_batch_size_per_gpu"] = 2;
        j["model"]["n_layers"] = 2;
        j["model"]["d_model"] = 32;
        j["data"]["builtin_tokens"] = 1 << 15;
        j["eval_interval"] = 0;
        j["gradient_clipping"] = 1.0;
        j["optimizer"]["params"] = {{"lr", 3e-3}, {"weight_decay", 0.1}};
        j["zero_optimization"] = {{"stage", stage},
                                  {"reduce_bucket_size", 3000},
                                  {"allgather_bucket_size", 3000},
                                  {"stage3_param_persistence_threshold", 100}};
        if (powersgd) j["compression"]["gradients"] = {{"type", "powersgd"}, {"rank", 4}};
        return j;
    }
    void train_ok(const nlohmann::json& j, const std::string& run, int ranks,
                  const std::string& args = "") {
        const CommandResult r = train_run(j, run, args, ranks);
        ASSERT_EQ(r.code, 0) << run << ": " << r.output;
    }
};

}  // namespace

TEST_F(PowerSgdCli, ConvergesNearTheUncompressedLossAtEveryStage) {
    train_ok(config(40, 0, false), "plain", 2);
    const double ref = read_run("plain").loss.back();
    for (int stage = 0; stage <= 3; ++stage) {
        const std::string run = "psgd" + std::to_string(stage);
        train_ok(config(40, stage, true), run, 2);
        const double got = read_run(run).loss.back();
        std::printf("[ powersgd ] stage %d: final loss %.5f against %.5f (%+.2f%%)\n", stage, got,
                    ref, 100 * (got / ref - 1));
        // Measured on the tiny model after 40 steps: +3% to +6% (the 2% target at the
        // recommended setting is not shown yet on this model).
        EXPECT_LE(std::fabs(got / ref - 1), 0.08) << "stage " << stage;
        const nlohmann::json g = step_lines(run).back()["compression"]["gradients"];
        EXPECT_EQ(g["codec"], "powersgd");
        EXPECT_TRUE(g["error_feedback"].get<bool>());
        // The matrices dominate this model: the factors cut the bytes several times.
        EXPECT_GT(g["ratio"].get<double>(), 2.0) << g.dump();
        EXPECT_GT(g["relative_error"].get<double>(), 0) << g.dump();
    }
}

TEST_F(PowerSgdCli, ThreadsAndMpiRebuildTheSameBits) {
    // Stage 3 with overlap_comm (its default there): each bucket's Q all-reduce is issued where
    // every rank issues it (Note [Finish order] in parallel/zero_grad_buckets.cpp).
    nlohmann::json j = config(4, 3, true);
    j["zero_optimization"]["overlap_comm"] = true;
    expect_threads_equal_mpirun(j, 4);
}

TEST_F(PowerSgdCli, QAndResidualsResumeBitForBit) {
    // Stopped at step 3 and resumed, the run continues exactly as the uninterrupted one: the
    // warm-started Q and the error-feedback residuals are in the checkpoint.
    auto cfg = [&](int steps) {
        nlohmann::json j = config(steps, 1, true);
        j["checkpoint"] = {{"interval_steps", 3}};
        return j;
    };
    train_ok(cfg(6), "full", 2);
    train_ok(cfg(3), "resumed", 2);
    const CommandResult r = train_run(cfg(6), "resumed", "--resume", 2);
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_EQ(r.output.find("restart at zero"), std::string::npos) << r.output;
    const RunLog full = read_run("full"), resumed = read_run("resumed");
    ASSERT_EQ(full.loss.size(), 6u);
    EXPECT_EQ(resumed.loss, full.loss);
    EXPECT_EQ(resumed.weights, full.weights);
    // Without warm start and error feedback there is nothing to keep: no comm state file.
    nlohmann::json cold = cfg(3);
    cold["compression"]["gradients"]["warm_start"] = false;
    cold["compression"]["gradients"]["error_feedback"] = false;
    train_ok(cold, "cold", 2);
    EXPECT_FALSE(fs::exists(dir_ / "cold" / "checkpoints" / "step_00000003" /
                            "comm_state_00000.safetensors"));
    EXPECT_TRUE(fs::exists(dir_ / "full" / "checkpoints" / "step_00000003" /
                           "comm_state_00000.safetensors"));
}

TEST_F(PowerSgdCli, BadKeysAreRefusedBeforeTheFirstStep) {
    struct Bad {
        nlohmann::json gradients;
        std::string says;
    };
    const Bad bad[] = {
        {{{"type", "powersgd"}, {"rank", 0}}, "compression.gradients.rank"},
        {{{"type", "powersgd"}, {"block", 64}}, "only the blockwise types"},
        {{{"type", "powersgd"}, {"min_compression_rate", 0.5}},
         "compression.gradients.min_compression_rate"},
        {{{"type", "int8"}, {"rank", 4}}, "only \"powersgd\" has it"},
    };
    int i = 0;
    for (const Bad& b : bad) {
        const std::string run = "bad" + std::to_string(i++);
        nlohmann::json j = config(2, 0, false);
        j["compression"]["gradients"] = b.gradients;
        const CommandResult r = train_run(j, run, "", 2);
        EXPECT_EQ(r.code, 2) << b.says << ": " << r.output;
        EXPECT_NE(r.output.find(b.says), std::string::npos) << r.output;
        EXPECT_FALSE(fs::exists(dir_ / run / "metrics.jsonl")) << b.says;
    }
}
