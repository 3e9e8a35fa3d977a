// DLRM from the command line: the synthetic example (shortened) on 2 ranks prints the teacher's
// AUC, writes samples/s and AUC to metrics.jsonl and the reference's weight names to
// model.safetensors; `export` reads them back; bad click data exits 2 naming the file and line
// or the key.
#include <gtest/gtest.h>

#include <fstream>

#include "checkpoint/safetensors.h"
#include "cli_fixture.h"
#include "util/error.h"

namespace zt::testing {
namespace {

std::vector<nlohmann::json> metrics(const fs::path& run) {
    std::vector<nlohmann::json> out;
    std::ifstream in(run / "metrics.jsonl");
    for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
    return out;
}

const std::string kExample = std::string(ZT_SOURCE_DIR) + "/examples/dlrm-synthetic.json";

TEST_F(Cli, DlrmSyntheticExampleShortenedOnTwoRanks) {
    const fs::path run = dir_ / "run";
    const CommandResult r = run_zerotrain(
        zt::str_cat("train ", kExample, " --run-dir ", run.string(),
                     " --ranks 2 --threads 1 --set steps=30 --set data.records=8000",
                     " --set data.eval_records=1000 --set eval_interval=30 --set eval_iters=3",
                     " --set steps_per_print=10"));
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_NE(r.output.find("the hidden teacher scores AUC"), std::string::npos) << r.output;
    bool rate = false, auc = false;
    for (const nlohmann::json& j : metrics(run)) {
        rate = rate || j.contains("samples_per_s");
        if (j.contains("samples_per_s")) {  // distinct ids of the micro-batch, per table
            ASSERT_EQ(j["data"]["unique_ids"].size(), 8u) << j.dump();
            for (const auto& u : j["data"]["unique_ids"]) {
                EXPECT_GE(u.get<int64_t>(), 1);
                EXPECT_LE(u.get<int64_t>(), 512);  // one id per bag, 512 bags
            }
            EXPECT_LE(j["data"]["unique_ids"][7].get<int64_t>(), 20);  // a table of 20 rows
        }
        if (j.contains("eval_auc")) {
            auc = true;
            EXPECT_GT(j["eval_auc"].get<double>(), 0.5);
            EXPECT_EQ(j["eval_samples"].get<int64_t>(), 3 * 512);
        }
        EXPECT_FALSE(j.contains("tokens_per_s"));
    }
    EXPECT_TRUE(rate);
    EXPECT_TRUE(auc);
    const SafetensorsFile weights((run / "model.safetensors").string());
    ASSERT_NE(weights.find("emb_l.7.weight"), nullptr);
    EXPECT_EQ(weights.find("emb_l.7.weight")->shape, (std::vector<int64_t>{20, 16}));
    EXPECT_NE(weights.find("bot_l.2.bias"), nullptr);
    EXPECT_NE(weights.find("top_l.4.weight"), nullptr);  // the appended logit layer
    EXPECT_EQ(weights.find("top_l.4.weight")->shape, (std::vector<int64_t>{1, 32}));

    const CommandResult e = run_zerotrain(zt::str_cat(
        "export ", kExample, " --from ", run.string(), " --out ", (dir_ / "x.safetensors").string(),
        " --dtype bf16"));
    ASSERT_EQ(e.code, 0) << e.output;
    EXPECT_EQ(SafetensorsFile((dir_ / "x.safetensors").string()).find("emb_l.0.weight")->dtype,
              "BF16");
}

TEST_F(Cli, DlrmBadClickDataExits2) {
    nlohmann::json j = nlohmann::json::parse(std::ifstream(kExample));
    j["steps"] = 2;
    j["model"]["table_rows"] = {100, 100};
    j["data"] = {{"type", "ctr"}, {"path", (dir_ / "missing.ctr").string()}};
    CommandResult r = run_zerotrain(zt::str_cat("train ", write_config(j), " --quiet --run-dir ",
                                                 (dir_ / "r1").string()));
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("missing.ctr"), std::string::npos) << r.output;

    // Criteo TSV: a line with too few columns is fatal by default, named FILE:LINE.
    const fs::path tsv = dir_ / "bad.tsv";
    {
        std::ofstream out(tsv);
        std::string good = "1";
        for (int i = 0; i < 13; ++i) good += "\t" + std::to_string(i);
        for (int i = 0; i < 26; ++i) good += "\t" + std::string(i % 2 ? "a1b2" : "");
        out << good << "\n" << good << "\n" << "0\t1\t2\n" << good << "\n";
    }
    std::vector<int64_t> rows(26, 50);
    j["model"]["table_rows"] = rows;
    j["data"] = {{"type", "criteo_tsv"}, {"path", tsv.string()}};
    r = run_zerotrain(zt::str_cat("train ", write_config(j), " --quiet --run-dir ",
                                   (dir_ / "r2").string()));
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("bad.tsv:3"), std::string::npos) << r.output;
    // Skipped instead, and counted in metrics.
    j["data"]["on_bad_record"] = "skip";
    j["train_micro_batch_size_per_gpu"] = 2;
    j["eval_interval"] = 0;
    r = run_zerotrain(zt::str_cat("train ", write_config(j), " --quiet --run-dir ",
                                   (dir_ / "r3").string()));
    ASSERT_EQ(r.code, 0) << r.output;
    const std::vector<nlohmann::json> m = metrics(dir_ / "r3");
    ASSERT_FALSE(m.empty());
    EXPECT_EQ(m.back()["data"]["records_skipped"], 1);

    // A model key error names the key.
    j["model"]["bottom_mlp"] = {64, 8};
    r = run_zerotrain(zt::str_cat("train ", write_config(j), " --quiet --run-dir ",
                                   (dir_ / "r4").string()));
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("model.bottom_mlp"), std::string::npos) << r.output;
}

TEST_F(Cli, DlrmTablesPastTheBudgetSayWhatWouldFit) {
    // 2 x 1M rows x 16 f32: 128 MB of weights and 128 MB of gradients; 100 MB per rank holds
    // them only partitioned over 4 ranks (64 MB each, plus activations).
    nlohmann::json j = nlohmann::json::parse(std::ifstream(kExample));
    j["model"]["table_rows"] = {1000000, 1000000};
    j["optimizer"] = {{"type", "SGD"}, {"params", {{"lr", 0.1}}}};
    j.erase("scheduler");
    j["memory"] = {{"budget_per_rank", "100MB"}};
    const CommandResult r = run_zerotrain(zt::str_cat(
        "train ", write_config(j), " --quiet --run-dir ", (dir_ / "r").string()));
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("past memory.budget_per_rank"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("zero_optimization.stage 3 over 4 ranks"), std::string::npos)
        << r.output;
    EXPECT_EQ(r.output.find("activation_checkpointing"), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(dir_ / "r" / "metrics.jsonl"));
}

}  // namespace
}  // namespace zt::testing
