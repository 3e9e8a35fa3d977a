// parallel.batch_shares (runtime/batch_shares.h): data-parallel ranks taking unequal parts of
// each micro-step train like one process taking them all (the equivalence rule), at ZeRO stages 0
// and 3, as ranks in threads and under mpirun; the engine says the shares; layouts it cannot run
// them with are refused by name.
#include <gtest/gtest.h>

#include "cli/cli_fixture.h"
#include "cli/dlrm_cli_util.h"

namespace zt::testing {
namespace {

class BatchShares : public Cli {
  protected:
    static nlohmann::json config() {
        nlohmann::json j = tiny();
        j["steps"] = 6;
        j["train_micro_batch_size_per_gpu"] = 2;
        j["gradient_accumulation_steps"] = 2;
        j["gradient_clipping"] = 0.5;
        j["optimizer"]["params"]["lr"] = 3e-3;
        j["model"]["n_layers"] = 2;
        j.erase("eval_interval");
        j.erase("eval_iters");
        j["data"].erase("eval_fraction");
        return j;
    }
};

TEST_F(BatchShares, UnequalSharesTrainLikeOneProcess) {
    nlohmann::json one = config();
    one["train_micro_batch_size_per_gpu"] = 4;  // the 3 + 1 of each micro-step, in one
    const CommandResult r = train_run(one, "one", "");
    ASSERT_EQ(r.code, 0) << r.output;
    const RunLog ref = read_run("one");
    ASSERT_EQ(ref.loss.size(), 6u);
    for (int stage : {0, 3}) {
        nlohmann::json j = config();
        j["parallel"] = {{"batch_shares", {3, 1}}};
        j["zero_optimization"] = {{"stage", stage}};
        const std::string name = "shares" + std::to_string(stage);
        const CommandResult t = train_run(j, name, "", 2);
        ASSERT_EQ(t.code, 0) << t.output;
        expect_close(read_run(name), ref, "shares 3+1, ZeRO-" + std::to_string(stage));
    }
    // Processes under mpirun read the same samples.
    nlohmann::json j = config();
    j["parallel"] = {{"batch_shares", {1, 3}}};
    const CommandResult m = mpirun_train(j, "mpi");
    ASSERT_EQ(m.code, 0) << m.output;
    expect_close(read_run("mpi"), ref, "shares 1+3, mpirun");
}

TEST_F(BatchShares, BannerSaysTheShares) {
    nlohmann::json j = config();
    j["steps"] = 1;
    j["parallel"] = {{"batch_shares", {3, 1}}};
    const std::string cfg = write_config(j, "banner.json");
    const CommandResult r =
        run_zerotrain("train " + cfg + " --ranks 2 --run-dir " + (dir_ / "banner").string());
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_NE(r.output.find("x 2 ranks, shares 3+1)"), std::string::npos) << r.output;
}

TEST_F(BatchShares, LayoutsThatCannotSplitUnequallyAreRefused) {
    nlohmann::json j = config();
    j["parallel"] = {{"batch_shares", {3, 1}}, {"pipeline", {{"stages", 2}}}};
    j["train_batch_size"] = 4;
    j["train_micro_batch_size_per_gpu"] = 2;
    j.erase("gradient_accumulation_steps");
    CommandResult r = train_run(j, "pipe", "", 2);
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("parallel.batch_shares: not supported with parallel.pipeline"),
              std::string::npos)
        << r.output;
    nlohmann::json d = small_sharded_dlrm(2);
    d["parallel"] = {{"batch_shares", {40, 24}}};
    r = train_run(d, "dlrm", "", 2);
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("not supported with sharded embedding tables"), std::string::npos)
        << r.output;
    nlohmann::json s = config();
    s["parallel"] = {{"batch_shares", {2, 1}}};
    r = train_run(s, "sum", "", 2);
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("the shares sum to 3"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace zt::testing
