// metrics.jsonl's comm_overlap (Note [Busy time]): on 2 ranks at every ZeRO stage, the time rank 0
// waited lies inside the time it had an op in flight or waited for one, the busy time is no more
// than the per-op seconds plus the waits (overlapping ops count once) nor than the step, and
// hidden = 1 - exposed / busy.
#include <gtest/gtest.h>

#include "cli/cli_fixture.h"

using zt::testing::Cli;
using zt::testing::CommandResult;

TEST_F(Cli, CommOverlapIsAShareOfTheBusyTime) {
    for (int stage = 0; stage <= 3; ++stage) {
        nlohmann::json j = tiny();
        j["steps"] = 4;
        j["train_batch_size"] = 4;
        j["zero_optimization"] = {{"stage", stage}, {"reduce_bucket_size", 2000},
                                  {"allgather_bucket_size", 3000},
                                  {"stage3_prefetch_bucket_size", 4000}};
        const std::string rd = (dir_ / ("s" + std::to_string(stage))).string();
        CommandResult r = zt::testing::run_zerotrain("train " + write_config(j) +
                                                     " --quiet --ranks 2 --run-dir " + rd);
        ASSERT_EQ(r.code, 0) << r.output;
        std::ifstream f(rd + "/metrics.jsonl");
        std::string line;
        int steps = 0;
        while (std::getline(f, line)) {
            const auto m = nlohmann::json::parse(line);
            if (!m.contains("step_time_s")) continue;
            ++steps;
            ASSERT_TRUE(m.contains("comm_overlap")) << line;
            const auto& o = m["comm_overlap"];
            const double busy = o["busy_s"], exposed = o["exposed_s"];
            double per_op = 0;
            for (const auto& [kind, v] : m["comm"].items()) per_op += v["seconds"].get<double>();
            EXPECT_GT(busy, 0.0) << "stage " << stage << ": " << line;
            // Overlapping ops count once; a wait extends an op at most by its own length.
            EXPECT_LE(busy, per_op + exposed + 1e-9) << "stage " << stage << ": " << line;
            EXPECT_LE(busy, m["step_time_s"].get<double>()) << "stage " << stage << ": " << line;
            // A wait is for an op in flight; 0.1 ms for the clock reads around it.
            EXPECT_LE(exposed, busy + 1e-4) << "stage " << stage << ": " << line;
            EXPECT_NEAR(o["hidden"].get<double>(), 1.0 - exposed / busy, 1e-12);
        }
        EXPECT_EQ(steps, 4) << "stage " << stage;
    }
}
