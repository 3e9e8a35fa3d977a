// DeepSpeed's wall_clock_breakdown and memory_breakdown as users bring them (docs/monitoring.md):
// accepted, and every steps_per_print steps (and after the last) rank 0 prints the time per step
// of each phase and the memory breakdown.
#include <gtest/gtest.h>

#include <regex>

#include "cli/cli_fixture.h"

using zt::testing::Cli;
using zt::testing::CommandResult;

namespace {

size_t count_of(const std::string& s, const std::string& part) {
    size_t n = 0;
    for (size_t at = s.find(part); at != std::string::npos; at = s.find(part, at + 1)) ++n;
    return n;
}

class Breakdown : public Cli {};

TEST_F(Breakdown, PrintedEveryStepsPerPrint) {
    nlohmann::json j = tiny();
    j.erase("eval_interval");
    j["steps"] = 5;
    j["steps_per_print"] = 2;
    j["wall_clock_breakdown"] = true;
    j["memory_breakdown"] = true;
    CommandResult r =
        zt::testing::run_zerotrain("train " + write_config(j) + " --quiet --run-dir " +
                                   (dir_ / "run").string() + " --ranks 2");
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_EQ(r.output.find("unknown key"), std::string::npos) << r.output;
    // Steps 1-2, 3-4 and the last, 5; rank 0 only.
    EXPECT_EQ(count_of(r.output, "wall_clock_breakdown: "), 3u) << r.output;
    EXPECT_EQ(count_of(r.output, "memory_breakdown: "), 3u) << r.output;
    const std::string num = "[0-9]+\\.[0-9]{2}";
    for (const char* steps : {"1-2", "3-4", "5-5"})
        EXPECT_TRUE(std::regex_search(
            r.output, std::regex(std::string("wall_clock_breakdown: steps ") + steps +
                                 ", time per step \\(ms\\) \\| forward: " + num +
                                 " \\| backward: " + num + " \\| optimizer_step: " + num +
                                 " \\| communication \\(waited, within the above\\): " + num)))
            << steps << "\n"
            << r.output;
    for (const char* step : {"2", "4", "5"})
        EXPECT_TRUE(std::regex_search(
            r.output, std::regex(std::string("memory_breakdown: step ") + step +
                                 " \\| allocated [0-9.]+ [KMG]?i?B \\(step peak .*\\) \\| params: "
                                 ".* \\| grads: .* \\| optimizer: .* \\| activations: .*")))
            << step << "\n"
            << r.output;
}

TEST_F(Breakdown, OffByDefaultAndWhenFalse) {
    nlohmann::json j = tiny();
    j["wall_clock_breakdown"] = false;
    CommandResult r = zt::testing::run_zerotrain("train " + write_config(j) +
                                                 " --quiet --run-dir " + (dir_ / "run").string());
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_EQ(r.output.find("wall_clock_breakdown: "), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("memory_breakdown: "), std::string::npos) << r.output;
}

}  // namespace
