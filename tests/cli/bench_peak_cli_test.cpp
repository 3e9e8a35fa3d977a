// `zerotrain bench peak` end to end: the table and the JSON file with every field docs/peak.md
// names, at one thread and a short time per kernel. Values are checked for shape and consistency
// (the peak is the last row), never against a speed.
#include <cmath>
#include <fstream>

#include "cli/cli_fixture.h"

namespace zt::testing {
namespace {

using BenchPeak = Cli;

TEST_F(BenchPeak, WritesTheTableAndJson) {
    const fs::path out = dir_ / "peak.json";
    const CommandResult r =
        run_zerotrain("bench peak --threads 1 --seconds 0.02 --json " + out.string());
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_NE(r.output.find("f32-fma GFLOP/s"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("peak at 1 threads"), std::string::npos) << r.output;

    std::ifstream f(out);
    ASSERT_TRUE(f.good());
    const nlohmann::json j = nlohmann::json::parse(f);
    EXPECT_TRUE(j["cpu"].is_string());
    EXPECT_FALSE(j["cpu"].get<std::string>().empty());
    ASSERT_TRUE(j["isa"].is_string());
    ASSERT_TRUE(j["per_threads"].is_array());
    ASSERT_EQ(j["per_threads"].size(), 1u);
    const nlohmann::json& row = j["per_threads"][0];
    EXPECT_EQ(row["threads"], 1);
    for (const char* k : {"f32_fma_gflops", "bf16_dot_gflops", "amx_bf16_gflops", "mem_read_gbps"}) {
        ASSERT_TRUE(row[k].is_number()) << k;
        EXPECT_TRUE(std::isfinite(row[k].get<double>())) << k;
        EXPECT_GE(row[k].get<double>(), 0) << k;
    }
    EXPECT_GT(row["f32_fma_gflops"].get<double>(), 0);
    EXPECT_GT(row["mem_read_gbps"].get<double>(), 0);
    EXPECT_EQ(j["peak_gflops"]["f32"], row["f32_fma_gflops"]);
    EXPECT_EQ(j["peak_gflops"]["bf16"].get<double>(),
              std::max(row["bf16_dot_gflops"].get<double>(), row["amx_bf16_gflops"].get<double>()));
    EXPECT_EQ(j["mem_read_gbps"], row["mem_read_gbps"]);
}

TEST_F(BenchPeak, RejectsBadOptions) {
    EXPECT_NE(run_zerotrain("bench peak --threads 0").code, 0);
    EXPECT_NE(run_zerotrain("bench peak --seconds -1").code, 0);
}

}  // namespace
}  // namespace zt::testing
