// Sharded embedding tables through the whole run (issue 13): the plan file and the log lines, the
// per-step embedding counters, export of the tables in safetensors, and a checkpoint written on one
// plan resuming on another (and on another rank count) with the same bits as an unbroken run.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "checkpoint/safetensors.h"
#include "comm/local/local_comm.h"
#include "runtime/config.h"
#include "runtime/trainer.h"

namespace zt {
namespace {

namespace fs = std::filesystem;

class DlrmShardedRun : public ::testing::Test {
  protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() /
               ("zt_dlrm_sharded_run_" +
                std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
        fs::remove_all(dir_);
        fs::create_directories(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }
    fs::path dir_;
};

const std::vector<int64_t> kRows = {4000, 3000, 97, 2500};

nlohmann::json config(const std::string& sharding, int64_t steps, int64_t accum) {
    return {
        {"train_micro_batch_size_per_gpu", 16},
        {"gradient_accumulation_steps", accum},
        {"steps", steps},
        {"steps_per_print", 1},
        {"optimizer", {{"type", "SGD"}, {"params", {{"lr", 0.1}}}}},
        {"model",
         {{"type", "dlrm"},
          {"table_rows", kRows},
          {"embedding_dim", 8},
          {"bottom_mlp", {16, 8}},
          {"top_mlp", {16}}}},
        {"embedding", {{"sharding", sharding}, {"optimizer", {{"type", "adam"}, {"lr", 0.01}}}}},
        {"data", {{"type", "synthetic"}, {"records", 4000}, {"eval_records", 64}}},
        {"eval_interval", 0},
        {"checkpoint", {{"interval_steps", 3}}},
        {"threads", 1}};
}

void run(const nlohmann::json& j, const fs::path& run_dir, int ranks,
         TrainOptions::Resume resume = TrainOptions::Resume::kNo) {
    nlohmann::json jj = j;
    const ParsedConfig pc = parse_config(jj, ranks);
    TrainOptions o;
    o.run_dir = run_dir.string();
    o.quiet = true;
    o.resume = resume;
    if (ranks == 1) {
        run_training(pc.config, o);
        return;
    }
    run_local_ranks(ranks, [&](Communicator& c) { run_training(pc.config, o, &c); });
}

// Every tensor of an exported file: the tables (the reference's names and shapes) and the MLPs.
std::map<std::string, std::vector<float>> read_weights(const fs::path& file) {
    const SafetensorsFile f(file.string());
    std::map<std::string, std::vector<float>> out;
    for (const SafetensorsTensor& t : f.tensors()) {
        out[t.name].resize(static_cast<size_t>(t.numel));
        f.read_f32(t.name, out[t.name].data(), t.numel);
    }
    for (size_t k = 0; k < kRows.size(); ++k) {
        const std::string name = "emb_l." + std::to_string(k) + ".weight";
        EXPECT_EQ(f.tensor(name).shape, (std::vector<int64_t>{kRows[k], 8})) << name;
    }
    return out;
}

TEST_F(DlrmShardedRun, PlanExportAndResumeOnAnotherPlan) {
    // An unbroken run on 2 ranks, row-wise: the reference.
    run(config("row", 6, 2), dir_ / "a", 2);
    const nlohmann::json plan =
        nlohmann::json::parse(std::ifstream(dir_ / "a/embedding_plan.json"));
    ASSERT_EQ(plan["tables"].size(), kRows.size());
    EXPECT_EQ(plan["tables"][0]["kind"], "row");
    EXPECT_EQ(plan["tables"][2]["kind"], "row");
    EXPECT_EQ(plan["optimizer"], "adam");
    // Metrics lines carry the embedding counters, over both ranks: rows updated per table add up
    // to the total, and cover at least the distinct ids of rank 0's own micro-batch.
    auto counters = [](const fs::path& file) {
        std::map<int64_t, nlohmann::json> by_step;
        std::ifstream metrics(file);
        for (std::string line; std::getline(metrics, line);) {
            const nlohmann::json j = nlohmann::json::parse(line);
            if (j.contains("embedding")) by_step[j["step"].get<int64_t>()] = j;
        }
        return by_step;
    };
    const auto row_wise = counters(dir_ / "a/metrics.jsonl");
    EXPECT_EQ(row_wise.size(), 6u);
    for (const auto& [step, j] : row_wise) {
        const nlohmann::json& e = j["embedding"];
        EXPECT_GT(e["embedding_unique_ids"].get<int64_t>(), 0);
        EXPECT_GT(e["alltoall_bytes"].get<int64_t>(), 0);
        ASSERT_EQ(e["rows_touched"].size(), kRows.size()) << step;
        int64_t sum = 0;
        for (size_t k = 0; k < kRows.size(); ++k) {
            const auto n =
                e["rows_touched"]["emb_l." + std::to_string(k) + ".weight"].get<int64_t>();
            EXPECT_GE(n, j["data"]["unique_ids"][k].get<int64_t>()) << step << " table " << k;
            EXPECT_LE(n, kRows[k]);
            sum += n;
        }
        EXPECT_EQ(sum, e["embedding_rows_touched"].get<int64_t>()) << step;
    }
    const auto ref = read_weights(dir_ / "a/model.safetensors");
    ASSERT_EQ(ref.size(), kRows.size() + 8);  // tables, bot_l.{0,2}.* and top_l.{0,2}.*

    // The same run broken at step 3, resumed table-wise: the same bits (the plan does not change
    // a row's gradient or update, Note [Merge order]), the Adam state carried across plans.
    run(config("row", 3, 2), dir_ / "b", 2);
    run(config("table", 6, 2), dir_ / "b", 2, TrainOptions::Resume::kLatest);
    const auto resumed = read_weights(dir_ / "b/model.safetensors");
    // Rows touched depend on the data, not on the plan: table-wise steps 4-6 count what the
    // row-wise run counted.
    const auto table_wise = counters(dir_ / "b/metrics.jsonl");
    for (int64_t step = 4; step <= 6; ++step)
        EXPECT_EQ(table_wise.at(step)["embedding"]["rows_touched"],
                  row_wise.at(step)["embedding"]["rows_touched"])
            << step;
    ASSERT_EQ(resumed.size(), ref.size());
    for (const auto& [name, w] : ref)
        EXPECT_EQ(0, std::memcmp(w.data(), resumed.at(name).data(), w.size() * sizeof(float)))
            << name;

    // Resumed on one rank, column-wise: 1 rank with accumulation 4 sums the micro-batches in
    // another order, so close, not equal (seen: 1e-7 relative).
    run(config("row", 3, 2), dir_ / "c", 2);
    run(config("column", 6, 4), dir_ / "c", 1, TrainOptions::Resume::kLatest);
    const auto one = read_weights(dir_ / "c/model.safetensors");
    for (const auto& [name, w] : ref)
        for (size_t i = 0; i < w.size(); ++i)
            ASSERT_NEAR(one.at(name)[i], w[i], 1e-5) << name << " element " << i;
}

TEST_F(DlrmShardedRun, BadEmbeddingKeysAreErrorsNamingTheKey) {
    auto expect_error = [](nlohmann::json j, const std::string& needle) {
        try {
            parse_config(j, 1);
            ADD_FAILURE() << "no error for " << needle;
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
        }
    };
    nlohmann::json j = config("row", 2, 1);
    j["embedding"]["sharding"] = "diagonal";
    expect_error(j, "embedding.sharding");
    j = config("row", 2, 1);
    j["embedding"]["sharding"] = {"row", "table"};
    expect_error(j, "one entry per table (4)");
    j = config("row", 2, 1);
    j["embedding"]["optimizer"]["type"] = "rmsprop";
    expect_error(j, "embedding.optimizer.type");
    j = config("row", 2, 1);
    j["embedding"]["dtype"] = "bf16";
    expect_error(j, "embedding.dtype");
    j = config("row", 2, 1);
    j["model"] = {{"type", "gpt"}};
    expect_error(j, "embedding");
}

TEST_F(DlrmShardedRun, TablesFourTimesOneRanksBudgetTrainOnFourRanks) {
    // 16 MiB of tables against a budget of 4 MiB of tables (plus room for the small MLPs and the
    // activations) per rank: one rank cannot hold them and says so before training; four ranks,
    // row-wise, hold a quarter each and train.
    const int64_t rows = 131072, dim = 8;
    const int64_t table_bytes = 4 * rows * dim * 4;
    nlohmann::json j = config("row", 2, 1);
    j["model"]["table_rows"] = std::vector<int64_t>(4, rows);
    j["embedding"]["optimizer"] = {{"type", "sgd"}};
    j["memory"] = {{"budget_per_rank", table_bytes / 4 + (int64_t{3} << 20)}};
    j.erase("checkpoint");
    try {
        run(j, dir_ / "one", 1);
        ADD_FAILURE() << "one rank trained tables past its budget";
    } catch (const Error& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("embedding"), std::string::npos) << msg;
        EXPECT_NE(msg.find("budget"), std::string::npos) << msg;
        EXPECT_FALSE(fs::exists(dir_ / "one/model.safetensors"));
    }
    run(j, dir_ / "four", 4);
    const nlohmann::json plan =
        nlohmann::json::parse(std::ifstream(dir_ / "four/embedding_plan.json"));
    ASSERT_EQ(plan["tables"].size(), 4u);
    for (const nlohmann::json& t : plan["tables"]) EXPECT_EQ(t["kind"], "row");
    std::ifstream metrics(dir_ / "four/metrics.jsonl");
    int steps = 0;
    for (std::string line; std::getline(metrics, line);) {
        const nlohmann::json m = nlohmann::json::parse(line);
        if (!m.contains("step_time_s")) continue;
        ++steps;
        // Every rank's tracked bytes stayed within its budget, the tables a quarter on each.
        EXPECT_LE(m["mem"]["peak"].get<int64_t>(), j["memory"]["budget_per_rank"].get<int64_t>());
        EXPECT_GE(m["mem"]["embedding"].get<int64_t>(), table_bytes / 4);
        EXPECT_LT(m["mem"]["embedding"].get<int64_t>(), table_bytes / 2);
    }
    EXPECT_EQ(steps, 2);
    EXPECT_TRUE(fs::exists(dir_ / "four/model.safetensors"));
}

}  // namespace
}  // namespace zt
