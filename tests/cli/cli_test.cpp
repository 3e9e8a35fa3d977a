// The zerotrain binary as a user runs it: exit codes, messages, what a run writes, and what a bad
// config leaves behind (nothing).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "checkpoint/safetensors.h"
#include "cli/cli_fixture.h"

namespace fs = std::filesystem;

using zt::testing::Cli;
using Result = zt::testing::CommandResult;

namespace {

Result run(const std::string& args) { return zt::testing::run_zerotrain(args); }

}  // namespace

TEST_F(Cli, VersionPrints) {
    Result r = run("--version");
    EXPECT_EQ(r.code, 0);
    EXPECT_NE(r.output.find("zerotrain "), std::string::npos) << r.output;
}

TEST_F(Cli, TrainWritesMetricsAndWeights) {
    std::string cfg = write_config(tiny());
    std::string rd = (dir_ / "run").string();
    Result r = run("train " + cfg + " --run-dir " + rd);
    ASSERT_EQ(r.code, 0) << r.output;
    std::ifstream f(rd + "/metrics.jsonl");
    std::string line;
    int steps = 0, evals = 0;
    while (std::getline(f, line)) {
        auto j = nlohmann::json::parse(line);
        if (j.contains("eval_loss")) {
            ++evals;
            continue;
        }
        ++steps;
        EXPECT_EQ(j["step"], steps);
        for (const char* k : {"loss", "lr", "grad_norm", "step_time_s", "tokens_per_s", "mem",
                              "comm_s", "skipped"})
            EXPECT_TRUE(j.contains(k)) << k << " missing in " << line;
        EXPECT_GT(j["mem"]["params"].get<int64_t>(), 0);
        EXPECT_GE(j["mem"]["peak"].get<int64_t>(), j["mem"]["params"].get<int64_t>());
        EXPECT_GE(j["mem"]["reserved"].get<int64_t>(), j["mem"]["peak"].get<int64_t>());
        EXPECT_GE(j["mem"]["fragmentation"].get<int64_t>(), 0);
    }
    EXPECT_EQ(steps, 3);
    EXPECT_EQ(evals, 2);  // at step 2 and at the last step
    zt::SafetensorsFile w(rd + "/model.safetensors");
    EXPECT_TRUE(w.contains("transformer.wte.weight"));
    EXPECT_FALSE(w.contains("lm_head.weight"));
    // Not a terminal: plain progress lines.
    EXPECT_NE(r.output.find("step 3/3"), std::string::npos) << r.output;
}

TEST_F(Cli, SetOverridesAKey) {
    std::string cfg = write_config(tiny());
    std::string rd = (dir_ / "run").string();
    Result r = run("train " + cfg + " --run-dir " + rd + " --set steps=1 --quiet");
    ASSERT_EQ(r.code, 0) << r.output;
    std::ifstream f(rd + "/metrics.jsonl");
    std::string line;
    int lines = 0;
    while (std::getline(f, line))
        if (line.find("eval_loss") == std::string::npos) ++lines;
    EXPECT_EQ(lines, 1);
}

TEST_F(Cli, BadInputExitsTwoAndWritesNothing) {
    std::string rd = (dir_ / "run").string();
    struct Case {
        nlohmann::json cfg;
        std::string expect;
    };
    nlohmann::json wrong_type = tiny();
    wrong_type["model"]["d_model"] = "wide";
    nlohmann::json batch = tiny();
    batch["train_batch_size"] = 5;
    batch["gradient_accumulation_steps"] = 2;
    nlohmann::json missing = tiny();
    missing["data"] = {{"type", "tokens"}, {"path", (dir_ / "nope.bin").string()}};
    for (const Case& c : {Case{wrong_type, "model.d_model"}, Case{batch, "train_batch_size"},
                          Case{missing, "nope.bin"}}) {
        std::string cfg = write_config(c.cfg);
        Result r = run("train " + cfg + " --run-dir " + rd);
        EXPECT_EQ(r.code, 2) << r.output;
        EXPECT_NE(r.output.find(c.expect), std::string::npos) << r.output;
        EXPECT_FALSE(fs::exists(rd)) << "a failed start left " << rd;
    }
    std::ofstream(dir_ / "bad.json") << "{\"steps\": 3,,}";
    Result r = run("train " + (dir_ / "bad.json").string() + " --run-dir " + rd);
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.output.find("bad.json"), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(rd));
    r = run("train " + (dir_ / "absent.json").string());
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.output.find("absent.json"), std::string::npos) << r.output;
}

TEST_F(Cli, UnknownKeyIsWarnedByName) {
    nlohmann::json j = tiny();
    j["optimizer"]["params"]["lr_typo"] = 1;
    std::string cfg = write_config(j);
    Result r = run("train " + cfg + " --run-dir " + (dir_ / "run").string() + " --set steps=1");
    EXPECT_EQ(r.code, 0) << r.output;
    EXPECT_NE(r.output.find("optimizer.params.lr_typo"), std::string::npos) << r.output;
}

TEST_F(Cli, ExportWritesInitialOrTrainedWeights) {
    std::string cfg = write_config(tiny());
    std::string init = (dir_ / "init.safetensors").string();
    ASSERT_EQ(run("export " + cfg + " --out " + init).code, 0);
    std::string rd = (dir_ / "run").string();
    ASSERT_EQ(run("train " + cfg + " --run-dir " + rd + " --quiet").code, 0);
    std::string trained = (dir_ / "trained.safetensors").string();
    Result r = run("export " + cfg + " --out " + trained + " --from " + rd + " --dtype bf16");
    ASSERT_EQ(r.code, 0) << r.output;
    zt::SafetensorsFile a(init), b(trained);
    EXPECT_EQ(a.tensor("transformer.wte.weight").dtype, "F32");
    EXPECT_EQ(b.tensor("transformer.wte.weight").dtype, "BF16");
    std::vector<float> wa(64 * 16), wb(64 * 16);
    a.read_f32("transformer.wte.weight", wa.data(), 64 * 16);
    b.read_f32("transformer.wte.weight", wb.data(), 64 * 16);
    EXPECT_NE(wa, wb) << "trained weights equal the initial ones";
    // The initial export is reproducible: weights depend only on the seed.
    std::string again = (dir_ / "again.safetensors").string();
    ASSERT_EQ(run("export " + cfg + " --out " + again).code, 0);
    zt::SafetensorsFile c(again);
    std::vector<float> wc(64 * 16);
    c.read_f32("transformer.wte.weight", wc.data(), 64 * 16);
    EXPECT_EQ(wa, wc);
}

TEST_F(Cli, TokenizeThenTrainOnTheFile) {
    std::string text;
    for (int i = 0; i < 400; ++i) text += "the quick brown fox jumps over the lazy dog. ";
    std::ofstream(dir_ / "in.txt") << text;
    std::string tok = (dir_ / "tokens.bin").string();
    ASSERT_EQ(run("data tokenize " + (dir_ / "in.txt").string() + " " + tok).code, 0);
    EXPECT_EQ(fs::file_size(tok), text.size() * 2);
    nlohmann::json j = tiny();
    j["model"]["vocab_size"] = 256;
    j["data"] = {{"type", "tokens"}, {"path", tok}, {"dtype", "uint16"}, {"eval_fraction", 0.1}};
    Result r = run("train " + write_config(j) + " --run-dir " + (dir_ / "run").string());
    EXPECT_EQ(r.code, 0) << r.output;
}

TEST_F(Cli, BudgetTheEstimatorKnowsIsTooSmallFailsBeforeTheFirstStep) {
    std::string cfg = write_config(tiny());
    std::string rd = (dir_ / "run").string();
    // The tiny model's state alone is about 100 KiB; 64 KiB cannot hold it.
    Result r = run("train " + cfg + " --run-dir " + rd + " --memory-budget 64KiB");
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("before the first step"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("activations"), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(rd));
    // A generous budget runs.
    r = run("train " + cfg + " --run-dir " + rd + " --memory-budget 64MiB --quiet");
    EXPECT_EQ(r.code, 0) << r.output;
}
