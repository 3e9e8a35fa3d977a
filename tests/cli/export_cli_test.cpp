// `zerotrain export CONFIG --from RUN_DIR` with the config a multi-rank run trained from (issue
// 12): the batch fits that run's rank count, not one process, and export reads any layout anyway.
#include <gtest/gtest.h>

#include "cli/cli_fixture.h"

using zt::testing::Cli;
using zt::testing::CommandResult;
using zt::testing::run_zerotrain;

namespace {

std::string file_bytes(const std::filesystem::path& p) {
    std::ifstream f(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
}

class Export : public Cli {};

TEST_F(Export, ConfigOfAMultiRankRun) {
    nlohmann::json j = tiny();
    j.erase("eval_interval");
    j["steps"] = 2;
    // All three batch terms, consistent for 2 ranks only (4 = 2 x 1 x 2), as a run under
    // mpirun -np 2 has them.
    j["train_batch_size"] = 4;
    j["train_micro_batch_size_per_gpu"] = 2;
    j["gradient_accumulation_steps"] = 1;
    j["checkpoint"] = {{"interval_steps", 2}};
    const std::string cfg = write_config(j);
    const std::string run = (dir_ / "run").string();
    CommandResult t = run_zerotrain("train " + cfg + " --quiet --ranks 2 --run-dir " + run);
    ASSERT_EQ(t.code, 0) << t.output;

    // From the run's final weights: the same tensors, written again.
    const std::string out = (dir_ / "w.safetensors").string();
    CommandResult e = run_zerotrain("export " + cfg + " --from " + run + " --out " + out);
    ASSERT_EQ(e.code, 0) << e.output;
    EXPECT_EQ(file_bytes(out), file_bytes(dir_ / "run" / "model.safetensors"));

    // From its checkpoint (2 shards, consolidated): the same weights again.
    const std::string out2 = (dir_ / "w2.safetensors").string();
    e = run_zerotrain("export " + cfg + " --from " + run + "/checkpoints/step_00000002 --out " +
                      out2);
    ASSERT_EQ(e.code, 0) << e.output;
    EXPECT_EQ(file_bytes(out2), file_bytes(dir_ / "run" / "model.safetensors"));
}

}  // namespace
