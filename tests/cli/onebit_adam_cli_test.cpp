// 1-bit Adam as a user runs it (docs/compression.md, "1-bit Adam"):
// "optimizer": {"type": "OneBitAdam", "params": {"freeze_step": k, ...}}. Its warm-up is AdamW
// without bias correction bit for bit; after it, the momentum travels in 1 bit a value (the bytes
// cut more than 10x) and the run ends near the uncompressed loss; threads and mpirun give the same
// bits; the momentum's residuals resume bit for bit; bad layouts are refused before the first
// step. The exchange itself is checked against its algorithm in
// tests/parallel/momentum_exchange_test.cpp, the update in tests/optim/onebit_adam_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "cli/cli_fixture.h"

using zt::testing::Cli;
using zt::testing::CommandResult;
namespace fs = std::filesystem;

namespace {

class OneBitAdamCli : public Cli {
  protected:
    // 8 samples a step over 2 ranks, 2 micro-steps each; 2 layers of d_model 32. beta2 0.95: the
    // variance has no bias correction, so the warm-up must be long against 1 / (1 - beta2) before
    // it is frozen (docs/compression.md).
    nlohmann::json config(int steps, int freeze_step, bool onebit) {
        nlohmann::json j = tiny();
        j["steps"] = steps;
        j["train_batch_size"] = 8;
        j["gradient_accumulation_steps"] = 2;
        j["train_micro_batch_size_per_gpu"] = 2;
        j["model"]["n_layers"] = 2;
        j["model"]["d_model"] = 32;
        j["data"]["builtin_tokens"] = 1 << 15;
        j["eval_interval"] = 0;
        if (onebit)
            j["optimizer"] = {{"type", "OneBitAdam"},
                              {"params",
                               {{"lr", 3e-3},
                                {"betas", {0.9, 0.95}},
                                {"weight_decay", 0.1},
                                {"freeze_step", freeze_step}}}};
        else  // the uncompressed peer: the same update as the warm-up's, every step
            j["optimizer"] = {{"type", "AdamW"},
                              {"params",
                               {{"lr", 3e-3},
                                {"betas", {0.9, 0.95}},
                                {"weight_decay", 0.1},
                                {"bias_correction", false}}}};
        return j;
    }
    void train_ok(const nlohmann::json& j, const std::string& run, int ranks,
                  const std::string& args = "") {
        const CommandResult r = train_run(j, run, args, ranks);
        ASSERT_EQ(r.code, 0) << run << ": " << r.output;
    }
    // The mean loss of the last k steps.
    static double tail_mean(const std::vector<double>& loss, size_t k) {
        double s = 0;
        for (size_t i = loss.size() - k; i < loss.size(); ++i) s += loss[i];
        return s / static_cast<double>(k);
    }
};

}  // namespace

TEST_F(OneBitAdamCli, WarmupIsAdamWWithoutBiasCorrectionBitForBit) {
    train_ok(config(6, 100, false), "adamw", 2);
    train_ok(config(6, 100, true), "warmup", 2);
    const RunLog a = read_run("adamw"), b = read_run("warmup");
    ASSERT_EQ(a.loss.size(), 6u);
    EXPECT_EQ(a.loss, b.loss);
    EXPECT_EQ(a.weights, b.weights);
    const nlohmann::json m = step_lines("warmup").back()["compression"]["momentum"];
    EXPECT_EQ(m["phase"], "warmup") << m.dump();
    EXPECT_EQ(m["wire_bytes"], 0) << m.dump();
}

TEST_F(OneBitAdamCli, CompressedPhaseCutsTheBytesAndEndsNearTheUncompressedLoss) {
    train_ok(config(60, 100, false), "adamw", 2);
    train_ok(config(60, 15, true), "onebit", 2);
    const RunLog a = read_run("adamw"), b = read_run("onebit");
    ASSERT_EQ(b.loss.size(), 60u);
    EXPECT_EQ(std::vector<double>(a.loss.begin(), a.loss.begin() + 15),
              std::vector<double>(b.loss.begin(), b.loss.begin() + 15));  // the warm-up
    const double ref = tail_mean(a.loss, 10), got = tail_mean(b.loss, 10);
    std::printf("[ onebit ] mean loss of the last 10 steps %.5f against %.5f (%+.2f%%)\n", got, ref,
                100 * (got / ref - 1));
    // Measured: -2.0% (freeze_step 10, 20, 30: -4.0%, +0.8%, +2.6%: the tiny model's final loss
    // moves by a few percent between neighbouring settings, so the bound leaves 1% over the
    // issue's 2%).
    EXPECT_LE(got, ref * 1.03) << "near the uncompressed loss";
    EXPECT_GE(got, ref * 0.9) << "not a different optimization";
    const std::vector<nlohmann::json> l = step_lines("onebit");
    EXPECT_EQ(l[14]["compression"]["momentum"]["phase"], "warmup");
    const nlohmann::json m = l.back()["compression"]["momentum"];
    EXPECT_EQ(m["phase"], "compressed") << m.dump();
    EXPECT_EQ(m["codec"], "onebit") << m.dump();
    EXPECT_GT(m["ratio"].get<double>(), 10.0) << m.dump();  // the target for 1 bit
    EXPECT_GT(m["relative_error"].get<double>(), 0.0) << m.dump();
    EXPECT_TRUE(std::isfinite(l.back()["grad_norm"].get<double>()));
}

TEST_F(OneBitAdamCli, ThreadsAndMpiRebuildTheSameBits) {
    const nlohmann::json j = config(5, 2, true);
    expect_threads_equal_mpirun(j, 5);
}

TEST_F(OneBitAdamCli, MomentumAndResidualsResumeBitForBit) {
    // Stopped at step 4 (in the compressed phase) and resumed, the run continues exactly as the
    // uninterrupted one: the momentum, the frozen variance, the update count and both error
    // feedback residuals are in the checkpoint. Resumed on 4 ranks (another layout), the
    // residuals restart at zero and the run says so.
    auto cfg = [&](int steps) {
        nlohmann::json j = config(steps, 2, true);
        j["checkpoint"] = {{"interval_steps", 4}};
        return j;
    };
    train_ok(cfg(7), "full", 2);
    train_ok(cfg(4), "resumed", 2);
    const CommandResult r = train_run(cfg(7), "resumed", "--resume", 2);
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_EQ(r.output.find("restart at zero"), std::string::npos) << r.output;
    const RunLog full = read_run("full"), resumed = read_run("resumed");
    ASSERT_EQ(full.loss.size(), 7u);
    EXPECT_EQ(resumed.loss, full.loss);
    EXPECT_EQ(resumed.weights, full.weights);
    EXPECT_TRUE(fs::exists(dir_ / "full" / "checkpoints" / "step_00000004" /
                           "comm_state_00001.safetensors"));

    train_ok(cfg(4), "other", 2);
    nlohmann::json four = cfg(7);
    four["gradient_accumulation_steps"] = 1;  // the same 8 samples a step on 4 ranks
    const CommandResult o = train_run(four, "other", "--resume", 4);
    ASSERT_EQ(o.code, 0) << o.output;
    EXPECT_NE(o.output.find("restart at zero: they were written for another layout"),
              std::string::npos)
        << o.output;
    EXPECT_EQ(read_run("other").loss.size(), 7u);
}

TEST_F(OneBitAdamCli, LayoutsItDoesNotComposeWithAreRefusedBeforeTheFirstStep) {
    struct Bad {
        nlohmann::json extra;
        std::string says;
    };
    const Bad bad[] = {
        {{{"zero_optimization", {{"stage", 2}}}}, "zero_optimization.stage 0"},
        {{{"gradient_clipping", 1.0}}, "gradient_clipping"},
        {{{"compression", {{"gradients", {{"type", "int8"}}}}}}, "remove compression.gradients"},
    };
    int i = 0;
    for (const Bad& b : bad) {
        const std::string run = "bad" + std::to_string(i++);
        nlohmann::json j = config(2, 1, true);
        j.update(b.extra);
        const CommandResult r = train_run(j, run, "", 2);
        EXPECT_EQ(r.code, 2) << b.says << ": " << r.output;
        EXPECT_NE(r.output.find(b.says), std::string::npos) << r.output;
        EXPECT_FALSE(fs::exists(dir_ / run / "metrics.jsonl")) << b.says;
    }
}
