// Stale embedding updates from the command line (embedding.staleness, Note [Stale embedding
// updates]): staleness 0 is the synchronous run bit for bit; staleness s applies a step's table
// update s steps late (lookups read rows up to s updates old: the losses of the first s + 1 steps
// are those of any deeper staleness, step s + 2's is not), converges like the synchronous run on
// the synthetic data, and resumes from a checkpoint to the uninterrupted run's weights bit for
// bit, over MPI as in threads; what it cannot compose with is refused.
#include <gtest/gtest.h>

#include "cli_fixture.h"
#include "dlrm_cli_util.h"
#include "util/error.h"

namespace zt::testing {
namespace {

nlohmann::json stale_config(int64_t steps) {
    nlohmann::json j = small_sharded_dlrm(steps);
    j["embedding"]["optimizer"] = {{"type", "adagrad"}, {"lr", 0.1}};
    j["data"]["records"] = 20000;
    j["data"]["eval_records"] = 2000;
    j["eval_interval"] = steps;
    j["eval_iters"] = 8;
    j["optimizer"] = {{"type", "AdamW"}, {"params", {{"lr", 0.01}}}};
    return j;
}

TEST_F(Cli, StalenessZeroIsSynchronousAndOneReadsRowsAStepOld) {
    nlohmann::json j = stale_config(60);
    ASSERT_EQ(train_run(j, "sync", "", 2).code, 0);
    j["embedding"]["staleness"] = 0;
    ASSERT_EQ(train_run(j, "zero", "", 2).code, 0);
    EXPECT_TRUE(slurp(dir_ / "zero/model.safetensors") == slurp(dir_ / "sync/model.safetensors"));
    j["embedding"]["staleness"] = 1;
    ASSERT_EQ(train_run(j, "stale", "", 2).code, 0);
    const RunLog a = read_run("sync"), b = read_run("stale");
    ASSERT_EQ(a.loss.size(), 60u);
    ASSERT_EQ(b.loss.size(), 60u);
    EXPECT_EQ(a.loss[0], b.loss[0]);  // nothing to be stale about yet
    EXPECT_NE(a.loss[1], b.loss[1]);  // step 2 reads the tables without step 1's update
    // The held exchanges go on a channel of their own, and count in the metrics all the same:
    // each step moves the synchronous run's bytes (the ids, so the rows, are the same).
    const auto bytes = [&](const std::string& run, size_t k) {
        const nlohmann::json line = step_lines(run).at(k);
        int64_t sum = 0;
        for (const auto& [kind, c] : line.at("comm").items()) sum += c["bytes"].get<int64_t>();
        return sum;
    };
    for (size_t k : {size_t{2}, size_t{30}}) {
        EXPECT_GT(bytes("sync", k), 0);
        EXPECT_EQ(bytes("stale", k), bytes("sync", k)) << "step " << k + 1;
    }
    // Converges as the synchronous run does.
    const double sync = last_eval_loss(dir_ / "sync"), stale = last_eval_loss(dir_ / "stale");
    ASSERT_GT(sync, 0);
    EXPECT_LT(stale, b.loss[0] * 0.95) << "the stale run learned";
    EXPECT_NEAR(stale, sync, 0.02 * sync);
    std::printf("eval loss after 60 steps: synchronous %.5f, staleness 1 %.5f (first step %.5f)\n",
                sync, stale, b.loss[0]);
}

// Staleness s: the tables change first at the end of step s + 1 (step 1's update), so steps 1 to
// s + 1 read the initial rows and a run of staleness s' > s has the same losses up to step s + 1
// and a different one at step s + 2. And a deep staleness still converges.
TEST_F(Cli, StalenessSDelaysTheFirstTableUpdateBySSteps) {
    nlohmann::json j = stale_config(60);
    std::vector<RunLog> runs;
    for (int s : {1, 3, 5}) {
        j["embedding"]["staleness"] = s;
        const std::string name = zt::str_cat("s", s);
        ASSERT_EQ(train_run(j, name, "", 2).code, 0);
        runs.push_back(read_run(name));
        ASSERT_EQ(runs.back().loss.size(), 60u);
    }
    const auto same_until = [](const RunLog& x, const RunLog& y) {  // first step that differs
        size_t k = 0;
        while (k < x.loss.size() && x.loss[k] == y.loss[k]) ++k;
        return k + 1;
    };
    EXPECT_EQ(same_until(runs[0], runs[1]), 3u);  // staleness 1 reads step 1's update at step 3
    EXPECT_EQ(same_until(runs[1], runs[2]), 5u);  // staleness 3 at step 5
    ASSERT_EQ(train_run(stale_config(60), "sync", "", 2).code, 0);
    const double sync = last_eval_loss(dir_ / "sync"), deep = last_eval_loss(dir_ / "s5");
    ASSERT_GT(sync, 0);
    EXPECT_LT(deep, runs[2].loss[0] * 0.95) << "the stale run learned";
    EXPECT_NEAR(deep, sync, 0.03 * sync);
    std::printf("eval loss after 60 steps: synchronous %.5f, staleness 5 %.5f\n", sync, deep);
}

TEST_F(Cli, StaleRunResumesBitForBitOverThreadsAndMpi) {
    nlohmann::json j = stale_config(9);
    j["embedding"]["staleness"] = 3;  // a checkpoint applies three held steps' updates
    j["checkpoint"] = {{"interval_steps", 4}};
    ASSERT_EQ(train_run(j, "full", "", 2).code, 0);
    const std::string want = slurp(dir_ / "full/model.safetensors");
    ASSERT_FALSE(want.empty());
    nlohmann::json part = j;
    part["steps"] = 6;  // checkpoints at 4; the run stops at 6 with its updates applied
    ASSERT_EQ(train_run(part, "part", "", 2).code, 0);
    fs::remove_all(dir_ / "part/checkpoints/step_00000006");
    const CommandResult r = train_run(j, "part", "--resume", 2);
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_TRUE(slurp(dir_ / "part/model.safetensors") == want);
    const std::string cfg = write_config(j, "mpi.json");
    const CommandResult mpi = run_command(
        zt::str_cat(kMpiEnv, "timeout 120 mpirun --oversubscribe --mca btl self,vader -np 2 ",
                    ZT_BINARY, " train ", cfg, " --quiet --run-dir ", (dir_ / "mpi").string()));
    ASSERT_EQ(mpi.code, 0) << mpi.output;
    EXPECT_TRUE(slurp(dir_ / "mpi/model.safetensors") == want);
}

TEST_F(Cli, StalenessRefusalsSayWhy) {
    nlohmann::json j = stale_config(2);
    j["embedding"]["staleness"] = 65;
    CommandResult r = train_run(j, "a", "", 1);
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("at most 64"), std::string::npos) << r.output;
    // Dynamic tables take staleness too (Note [Stale dynamic updates];
    // tests/cli/dynamic_staleness_cli_test.cpp).
    j["embedding"]["staleness"] = 1;
    j["model"]["tables"] = {{{"dynamic", true}, {"dim", 8}},
                            {{"rows", 2500}, {"dim", 8}},
                            {{"rows", 40}, {"dim", 8}}};
    j["model"].erase("table_rows");
    j["model"].erase("embedding_dim");
    j["embedding"]["sharding"] = {"auto", "table", "data_parallel"};
    r = train_run(j, "b", "", 1);
    EXPECT_EQ(r.code, 0) << r.output;
}

// Note [Stale updates on a tier]: a stale update fetches the rows it lands on again (the cache
// may have let them go since their lookup), so tiered tables with staleness train the bits of
// the same tables in memory, through checkpoints (which apply the held updates) and a resume;
// the fetches for updates are not lookups (hits + misses stay the distinct ids asked for).
TEST_F(Cli, StaleTieredTablesTrainLikeStaleTablesInMemory) {
    nlohmann::json j = stale_config(12);
    j["embedding"]["staleness"] = 2;
    j["checkpoint"] = {{"interval_steps", 5}};
    j["eval_interval"] = 0;
    ASSERT_EQ(train_run(j, "mem", "", 2).code, 0);
    const std::string want = slurp(dir_ / "mem/model.safetensors");
    ASSERT_FALSE(want.empty());
    for (const char* device : {"cpu", "nvme"}) {
        SCOPED_TRACE(device);
        j["embedding"]["tier"] = {{"device", device}, {"cache_ratio", 0.1}};
        if (std::string(device) == "nvme") j["embedding"]["tier"]["nvme_path"] = dir_.string();
        const std::string run = zt::str_cat("tier-", device);
        const CommandResult r = train_run(j, run, "", 2);
        ASSERT_EQ(r.code, 0) << r.output;
        EXPECT_TRUE(slurp(dir_ / run / "model.safetensors") == want);
        int64_t misses = 0;
        for (const nlohmann::json& l : step_lines(run)) {
            const nlohmann::json& e = l.at("embedding");
            const nlohmann::json& t = e.at("tier");
            EXPECT_EQ(t["hits"].get<int64_t>() + t["misses"].get<int64_t>(),
                      e["embedding_unique_ids"].get<int64_t>());
            misses += t["misses"].get<int64_t>();
        }
        EXPECT_GT(misses, 0);
    }
    // Resumed from step 10's checkpoint (its held updates applied), to the same bytes.
    fs::remove(dir_ / "tier-cpu/model.safetensors");
    fs::remove_all(dir_ / "tier-cpu/checkpoints/step_00000012");
    j["embedding"]["tier"] = {{"device", "cpu"}, {"cache_ratio", 0.1}};
    const CommandResult r = train_run(j, "tier-cpu", "--resume", 2);
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_TRUE(slurp(dir_ / "tier-cpu/model.safetensors") == want);
}

}  // namespace
}  // namespace zt::testing
