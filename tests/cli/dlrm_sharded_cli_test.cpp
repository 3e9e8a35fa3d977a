// Sharded embedding tables from the command line (docs/embedding.md): the same run as 2 MPI
// processes and as 2 ranks in threads gives the same weight file byte for byte (the exchanges over
// MPI and over the local backend add in the same order), the plan is printed, `export --from`
// carries the tables out of a checkpoint, and tables past every budget exit 2 saying what fits.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "checkpoint/safetensors.h"
#include "cli_fixture.h"
#include "dlrm_cli_util.h"
#include "util/error.h"

namespace zt::testing {
namespace {

using zt::testing::kMpiEnv;

nlohmann::json sharded_config() {
    return {{"train_micro_batch_size_per_gpu", 32},
            {"steps", 4},
            {"steps_per_print", 1},
            {"optimizer", {{"type", "SGD"}, {"params", {{"lr", 0.1}}}}},
            {"model",
             {{"type", "dlrm"},
              {"table_rows", {3001, 700, 40, 1500}},
              {"embedding_dim", 8},
              {"bottom_mlp", {16, 8}},
              {"top_mlp", {16}}}},
            {"embedding",
             {{"sharding", {"row", "table", "data_parallel", "column"}},
              {"optimizer", {{"type", "rowwise_adagrad"}, {"lr", 0.05}}}}},
            {"data", {{"type", "synthetic"}, {"records", 2000}, {"eval_records", 128}}},
            {"eval_interval", 4},
            {"eval_iters", 2},
            {"checkpoint", {{"interval_steps", 2}}},
            {"threads", 1}};
}

// Note [Small shards side by side]: on two threads the small shards' updates run one per thread
// and the large one's rows split over both; the weights are those of one thread, bit for bit
// (Adam state per row, five small tables and one large). The f32 products' library is pinned:
// the one measured fastest may differ between one and two threads (docs/gemm.md), and the two
// libraries round differently (seen on a 2-vCPU Xeon: oneDNN at one thread, OpenBLAS at two).
TEST_F(Cli, SmallShardsUpdatedSideBySideTrainAsOnOneThread) {
    nlohmann::json j = sharded_config();
    j["model"]["table_rows"] = {200000, 50, 60, 70, 80, 90};
    j["model"]["embedding_dim"] = 64;
    j["model"]["bottom_mlp"] = {16, 64};
    j["train_micro_batch_size_per_gpu"] = 1024;
    j["embedding"] = {{"sharding", "table"}, {"optimizer", {{"type", "adam"}, {"lr", 0.01}}}};
    j["steps"] = 3;
    j.erase("checkpoint");
    j["eval_interval"] = 0;
    j.erase("threads");
    const std::string cfg = write_config(j);
    std::string weights[2];
    for (int t = 1; t <= 2; ++t) {
        const std::string run = (dir_ / zt::str_cat("t", t)).string();
        const CommandResult r =
            run_command(zt::str_cat("ZT_GEMM_F32=onednn ", ZT_BINARY, " train ", cfg,
                                    " --quiet --threads ", t, " --run-dir ", run));
        ASSERT_EQ(r.code, 0) << r.output;
        weights[t - 1] = slurp(fs::path(run) / "model.safetensors");
    }
    ASSERT_FALSE(weights[0].empty());
    EXPECT_TRUE(weights[0] == weights[1]);
}

TEST_F(Cli, ShardedTablesOverMpiMatchThreadsByteForByte) {
    nlohmann::json j = sharded_config();
    // Row-wise Adagrad keeps one accumulator per whole row: a column-split table is refused.
    const CommandResult bad =
        run_zerotrain(zt::str_cat("train ", write_config(j, "bad.json"),
                                  " --ranks 2 --quiet --run-dir ", (dir_ / "bad").string()));
    EXPECT_EQ(bad.code, 2) << bad.output;
    EXPECT_NE(bad.output.find("row-wise Adagrad"), std::string::npos) << bad.output;

    j["embedding"]["sharding"] = {"row", "table", "data_parallel", "row"};
    const std::string cfg = write_config(j);
    const CommandResult threads = run_zerotrain(
        zt::str_cat("train ", cfg, " --ranks 2 --run-dir ", (dir_ / "threads").string()));
    ASSERT_EQ(threads.code, 0) << threads.output;
    EXPECT_NE(threads.output.find("emb_l.0.weight (3001 x 8): row"), std::string::npos)
        << threads.output;
    const CommandResult mpi = run_command(
        zt::str_cat(kMpiEnv, "timeout 120 mpirun --oversubscribe --mca btl self,vader -np 2 ",
                    ZT_BINARY, " train ", cfg, " --quiet --run-dir ", (dir_ / "mpi").string()));
    ASSERT_EQ(mpi.code, 0) << mpi.output;
    const std::string a = slurp(dir_ / "threads/model.safetensors");
    ASSERT_FALSE(a.empty());
    EXPECT_TRUE(a == slurp(dir_ / "mpi/model.safetensors"));

    // Exported from the last checkpoint (step 4), on one process: the same tables.
    fs::remove(dir_ / "mpi/model.safetensors");
    const CommandResult e =
        run_zerotrain(zt::str_cat("export ", cfg, " --from ", (dir_ / "mpi").string(), " --out ",
                                  (dir_ / "x.safetensors").string()));
    ASSERT_EQ(e.code, 0) << e.output;
    const SafetensorsFile x((dir_ / "x.safetensors").string());
    const SafetensorsFile t((dir_ / "threads/model.safetensors").string());
    for (const char* name :
         {"emb_l.0.weight", "emb_l.1.weight", "emb_l.2.weight", "emb_l.3.weight"}) {
        ASSERT_NE(x.find(name), nullptr) << name;
        const auto dx = x.data(name), dt = t.data(name);
        ASSERT_EQ(dx.size(), dt.size()) << name;
        EXPECT_EQ(0, std::memcmp(dx.data(), dt.data(), dx.size())) << name;
    }
}

// embedding.rank_weights: the table-wise tables go 3 : 1 to the ranks, and the run trains as
// the unweighted one does (only where the tables live changed).
TEST_F(Cli, RankWeightsPlaceTablesAndTrainAlike) {
    nlohmann::json j = sharded_config();
    j["embedding"]["sharding"] = "table";
    j["model"]["table_rows"] = {3001, 3001, 3001, 3001};
    j.erase("checkpoint");
    const CommandResult even = train_run(j, "even", "", 2);
    ASSERT_EQ(even.code, 0) << even.output;
    j["embedding"]["rank_weights"] = {3, 1};
    const std::string cfg = write_config(j, "weighted.json");
    const CommandResult r = run_zerotrain(
        zt::str_cat("train ", cfg, " --ranks 2 --run-dir ", (dir_ / "weighted").string()));
    ASSERT_EQ(r.code, 0) << r.output;
    size_t on0 = 0;
    for (size_t at = r.output.find("table on rank 0"); at != std::string::npos;
         at = r.output.find("table on rank 0", at + 1))
        ++on0;
    EXPECT_EQ(on0, 3u) << r.output;
    expect_close(read_run("weighted"), read_run("even"), "rank_weights 3:1");
    j["embedding"]["rank_weights"] = {1, 1, 1};
    const CommandResult bad = train_run(j, "bad", "", 2);
    EXPECT_EQ(bad.code, 2) << bad.output;
    EXPECT_NE(bad.output.find("embedding.rank_weights: expected one weight per rank (2), got 3"),
              std::string::npos)
        << bad.output;
}

TEST_F(Cli, ShardedTablesPastEveryBudgetExit2) {
    nlohmann::json j = sharded_config();
    j["model"]["table_rows"] = {4000000, 3000000, 40, 1500};
    j["embedding"]["sharding"] = "table";
    j["memory"] = {{"budget_per_rank", "64MiB"}};
    const CommandResult r = run_zerotrain(zt::str_cat(
        "train ", write_config(j), " --ranks 2 --quiet --run-dir ", (dir_ / "run").string()));
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("embedding"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("ranks"), std::string::npos) << r.output;
}

// Ranks of unequal memory (--rank-memory) with tables placed whole on ranks: where the equal
// placement puts more tables on the smaller rank than it holds, `plan` places them by the ranks'
// budgets (embedding.rank_weights, docs/planner.md), `train --auto` runs that placement, and the
// run's tables take the bytes the plan predicted for the most loaded rank.
TEST_F(Cli, TablesPlacedByRankMemoryRunAsPlanned) {
    nlohmann::json j = sharded_config();
    j["model"]["table_rows"] = {40000, 30000, 20000, 10000};
    j["embedding"] = {{"sharding", "table"}, {"optimizer", {{"type", "sgd"}, {"lr", 0.05}}}};
    j["steps"] = 2;
    j.erase("checkpoint");
    j["eval_interval"] = 0;
    const std::string cfg = write_config(j);
    const CommandResult even =
        run_zerotrain(zt::str_cat("plan ", cfg, " --ranks 2 --json --top 1"));
    ASSERT_EQ(even.code, 0) << even.output;
    const int64_t equal_tables =
        nlohmann::json::parse(even.output)["plans"][0]["device_bytes"]["embedding"].get<int64_t>();
    const std::string ranks = zt::str_cat(" --ranks 2 --rank-memory 1GiB,", equal_tables * 9 / 10);
    const CommandResult placed = run_zerotrain(zt::str_cat("plan ", cfg, ranks, " --json --top 1"));
    ASSERT_EQ(placed.code, 0) << placed.output;
    const nlohmann::json best = nlohmann::json::parse(placed.output)["plans"][0];
    ASSERT_TRUE(best["strategy"].contains("table_weights")) << placed.output;
    bool sets_weights = false;
    for (const auto& x : best["config_sets"])
        sets_weights =
            sets_weights || x.get<std::string>().rfind("embedding.rank_weights=", 0) == 0;
    EXPECT_TRUE(sets_weights) << best.dump();
    const std::string run = (dir_ / "placed").string();
    const CommandResult t =
        run_zerotrain(zt::str_cat("train ", cfg, " --auto", ranks, " --run-dir ", run));
    ASSERT_EQ(t.code, 0) << t.output;
    EXPECT_NE(t.output.find("tables by "), std::string::npos) << t.output;
    std::ifstream f(run + "/metrics.jsonl");
    std::string line;
    int64_t measured = -1;
    while (std::getline(f, line)) {
        const nlohmann::json m = nlohmann::json::parse(line);
        if (m.contains("mem")) measured = m["mem"]["embedding"].get<int64_t>();
    }
    EXPECT_EQ(measured, best["device_bytes"]["embedding"].get<int64_t>());
    EXPECT_GT(measured, equal_tables) << "the larger rank holds more than its equal share";
    EXPECT_LE(measured, int64_t{100000} * 8 * 4) << "at most every table (sparse SGD: no state)";
}

}  // namespace
}  // namespace zt::testing
