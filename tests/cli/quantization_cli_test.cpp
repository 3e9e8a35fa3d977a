// Quantization-aware training as a user runs it (docs/quantization.md): "compression":
// {"quantization": {...}} marks every metrics line with whether it trained quantized, evaluates
// the quantized model beside the full-precision one once it is on, trains on 2 ranks like one
// process, and refuses what does not quantize before any work.
#include <gtest/gtest.h>

#include <fstream>

#include "cli/cli_fixture.h"

using zt::testing::Cli;
using zt::testing::CommandResult;
namespace fs = std::filesystem;

namespace {

class QuantizationCli : public Cli {
  protected:
    nlohmann::json config(int steps, int ranks) {
        nlohmann::json j = tiny();
        j["steps"] = steps;
        j["train_batch_size"] = 8;
        j["train_micro_batch_size_per_gpu"] = 8 / ranks;
        j["data"]["builtin_tokens"] = 1 << 14;
        j["eval_interval"] = 2;
        j["compression"]["quantization"] = {
            {"weights", "int8"}, {"activations", "fp8_e4m3"}, {"start_step", 3}};
        return j;
    }
    std::vector<nlohmann::json> lines(const std::string& run) {
        std::vector<nlohmann::json> out;
        std::ifstream f(dir_ / run / "metrics.jsonl");
        std::string line;
        while (std::getline(f, line)) out.push_back(nlohmann::json::parse(line));
        return out;
    }
};

}  // namespace

TEST_F(QuantizationCli, MetricsSayWhenAndEvaluationComparesWithFullPrecision) {
    ASSERT_EQ(train_run(config(6, 1), "one", "", 1).code, 0);
    int evals = 0;
    for (const nlohmann::json& j : lines("one")) {
        const int64_t step = j["step"];
        if (j.contains("loss")) {
            ASSERT_TRUE(j.contains("quantization")) << j.dump();
            EXPECT_EQ(j["quantization"]["active"].get<bool>(), step >= 3) << j.dump();
            EXPECT_EQ(j["quantization"]["weights"], "int8");
            EXPECT_EQ(j["quantization"]["activations"], "fp8_e4m3");
        }
        if (j.contains("eval_loss")) {
            ++evals;
            // Step 2's evaluation is of the model step 3 trains: quantized.
            EXPECT_TRUE(j.contains("eval_loss_full_precision")) << j.dump();
            EXPECT_NE(j["eval_loss"], j["eval_loss_full_precision"]) << j.dump();
        }
    }
    EXPECT_EQ(evals, 3);
    // Before the start, no full-precision twin: the model is full precision.
    nlohmann::json late = config(2, 1);
    late["compression"]["quantization"]["start_step"] = 10;
    ASSERT_EQ(train_run(late, "late", "", 1).code, 0);
    for (const nlohmann::json& j : lines("late")) {
        if (j.contains("eval_loss")) {
            EXPECT_FALSE(j.contains("eval_loss_full_precision")) << j.dump();
        }
    }
}

TEST_F(QuantizationCli, TwoRanksTrainLikeOneProcess) {
    ASSERT_EQ(train_run(config(5, 1), "one", "", 1).code, 0);
    nlohmann::json two = config(5, 2);
    two["zero_optimization"] = {{"stage", 3}};
    ASSERT_EQ(train_run(two, "two", "", 2).code, 0);
    expect_close(read_run("two"), read_run("one"), "dp2 ZeRO-3 against one process");
}

TEST_F(QuantizationCli, WhatDoesNotQuantizeIsRefusedBeforeAnyWork) {
    struct Case {
        nlohmann::json q;
        int tp;
        const char* says;
    };
    const std::vector<Case> cases = {
        {{{"weights", "int4"}}, 1, "compression.quantization.weights: expected one of"},
        {{{"weights", "none"}, {"activations", "none"}}, 1, "neither weights nor activations"},
        {{{"clip", 0}}, 1, "expected a number in (0, 1]"},
        {{{"params", {"nothing"}}}, 1, "no Linear weight's name contains any of \"nothing\""},
        {{{"weights", "int8"}}, 2, "quantization-aware training with parallel.tensor"},
    };
    for (const Case& c : cases) {
        nlohmann::json j = config(3, 1);
        j["compression"]["quantization"] = c.q;
        if (c.tp > 1) {
            j["parallel"]["tensor"] = c.tp;
            j["train_micro_batch_size_per_gpu"] = 8;
        }
        const CommandResult r = train_run(j, "bad", "", c.tp);
        EXPECT_EQ(r.code, 2) << c.q.dump() << r.output;
        EXPECT_NE(r.output.find(c.says), std::string::npos) << c.q.dump() << r.output;
        EXPECT_FALSE(fs::exists(dir_ / "bad" / "model.safetensors"));
    }
}
