// `zerotrain estimate` as a user runs it: text and JSON output, ZeRO stages and offload the
// training config parser still refuses, and exit codes for bad input.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "models/gpt/gpt_family.h"
#include "planner/estimate.h"
#include "run_command.h"

namespace fs = std::filesystem;

namespace zt {

namespace {

struct Result {
    int code = -1;
    std::string out;  // stdout only
};

Result run(const std::string& args) {
    testing::CommandResult c = testing::run_zerotrain(args, /*with_stderr=*/false);
    return {c.code, c.output};
}

std::string example() { return std::string(ZT_SOURCE_DIR) + "/examples/gpt-tiny.json"; }

}  // namespace

TEST(EstimateCli, TextNamesTheStageAndFormula) {
    const Result r = run("estimate " + example() + " --ranks 4 --zero-stage 2");
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("this run: ZeRO-2, 4Psi + 12Psi/N"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("N = 4"), std::string::npos) << r.out;
}

TEST(EstimateCli, JsonMatchesThePlanner) {
    const Result r =
        run("estimate " + example() + " --ranks 3 --zero-stage 1 --json --set bf16.enabled=true");
    ASSERT_EQ(r.code, 0) << r.out;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    EstimateSpec spec;
    spec.model = std::make_shared<GptFamily>(GptOptions{256, 64, 64, 2, 4}, GptDataOptions{});
    spec.micro_batch = 32;
    spec.state.ranks = 3;
    spec.state.zero_stage = 1;
    spec.state.compute_dtype = DType::kBF16;
    const Estimate est = estimate_run(spec);
    EXPECT_EQ(j["precision"], "bf16");
    EXPECT_EQ(j["padded_numel"], est.state.padded_numel);
    for (MemCategory c :
         {MemCategory::kParams, MemCategory::kGrads, MemCategory::kOptimizer, MemCategory::kComm})
        EXPECT_EQ(j["device"][mem_category_name(c)], est.device[static_cast<int>(c)])
            << mem_category_name(c);
    EXPECT_EQ(j["activations"]["policies"]["none"]["peak"], est.policies[0].peak);
}

TEST(EstimateCli, AcceptsZeroAndOffloadFromTheConfig) {
    const fs::path dir = fs::temp_directory_path() / ("zt_estimate_" + std::to_string(getpid()));
    fs::create_directories(dir);
    nlohmann::json cfg = nlohmann::json::parse(std::ifstream(example()));
    cfg["zero_optimization"] = {{"stage", 3}, {"offload_optimizer", {{"device", "cpu"}}}};
    const std::string path = (dir / "zero3.json").string();
    std::ofstream(path) << cfg.dump(2);
    const Result r = run("estimate " + path + " --ranks 2 --json");
    fs::remove_all(dir);
    ASSERT_EQ(r.code, 0) << r.out;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["zero_stage"], 3);
    EXPECT_EQ(j["offload_optimizer"], "cpu");
    EXPECT_EQ(j["device"]["optimizer"], 0);
    EXPECT_GT(j["host"]["optimizer"].get<int64_t>(), 0);
}

TEST(EstimateCli, BadInputExitsWithTwo) {
    EXPECT_EQ(run("estimate " + example() + " --zero-stage 4").code, 2);
    EXPECT_EQ(run("estimate " + example() + " --ranks 0").code, 2);
    EXPECT_EQ(run("estimate " + example() + " --set zero_optimization.stage=7").code, 2);
    EXPECT_EQ(run("estimate /nonexistent.json").code, 2);
}

}  // namespace zt
