// checkpoint.keep_last (docs/checkpoints.md): only the newest N checkpoints stay, `latest` names
// the newest, and a resume continues from it.
#include <gtest/gtest.h>

#include <algorithm>

#include "cli/cli_fixture.h"

using zt::testing::Cli;
using zt::testing::CommandResult;
using zt::testing::run_zerotrain;
namespace fs = std::filesystem;

namespace {

class KeepLast : public Cli {
  protected:
    std::vector<std::string> checkpoints() {
        std::vector<std::string> names;
        for (const auto& e : fs::directory_iterator(dir_ / "run" / "checkpoints"))
            if (e.is_directory()) names.push_back(e.path().filename().string());
        std::sort(names.begin(), names.end());
        return names;
    }
};

TEST_F(KeepLast, KeepsTheNewestN) {
    nlohmann::json j = tiny();
    j.erase("eval_interval");
    j["steps"] = 5;
    j["checkpoint"] = {{"interval_steps", 1}, {"keep_last", 2}};
    const std::string cfg = write_config(j);
    const std::string run = (dir_ / "run").string();
    CommandResult r = run_zerotrain("train " + cfg + " --quiet --run-dir " + run);
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_EQ(checkpoints(), (std::vector<std::string>{"step_00000004", "step_00000005"}));
    std::ifstream latest(dir_ / "run" / "checkpoints" / "latest");
    std::string named;
    latest >> named;
    EXPECT_NE(named.find("step_00000005"), std::string::npos) << named;

    // A resumed run keeps counting: after 2 more steps, the newest 2 are 6 and 7.
    j["steps"] = 7;
    write_config(j);
    r = run_zerotrain("train " + cfg + " --quiet --run-dir " + run + " --resume");
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_EQ(checkpoints(), (std::vector<std::string>{"step_00000006", "step_00000007"}));

    // 0 (the default) keeps all.
    j["steps"] = 3;
    j["checkpoint"] = {{"interval_steps", 1}};
    write_config(j);
    r = run_zerotrain("train " + cfg + " --quiet --run-dir " + run + " --overwrite");
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_EQ(checkpoints(),
              (std::vector<std::string>{"step_00000001", "step_00000002", "step_00000003"}));
}

}  // namespace
