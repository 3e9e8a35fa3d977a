// `zerotrain estimate` of a pipeline config as a user runs it (docs/memory.md, "Pipeline
// stages"): the text ends with one row per stage (its blocks, state, activations in flight,
// device total) and the most loaded stage; --json carries the same rows, each stage's parameters
// the formula's; a config without a pipeline prints no table.
#include <gtest/gtest.h>

#include <sstream>

#include "cli/cli_fixture.h"

using zt::testing::Cli;
using zt::testing::CommandResult;

namespace {

class PipelineEstimateCli : public Cli {
  protected:
    nlohmann::json config(const nlohmann::json& pipeline) {
        nlohmann::json j = tiny();
        j["train_batch_size"] = 8;
        j["model"]["n_heads"] = 4;
        j["model"]["n_layers"] = 4;
        if (!pipeline.is_null()) j["parallel"]["pipeline"] = pipeline;
        return j;
    }
    CommandResult estimate(const nlohmann::json& j, const std::string& args = "") {
        return zt::testing::run_zerotrain("estimate " + write_config(j, "e.json") + args, false);
    }
    // The lines of the per-stage table: those after its header up to "most loaded".
    static std::vector<std::string> stage_rows(const std::string& text) {
        std::vector<std::string> rows;
        std::istringstream in(text);
        std::string line;
        bool inside = false;
        while (std::getline(in, line)) {
            if (line.rfind("per-stage device bytes", 0) == 0) {
                inside = true;
                std::getline(in, line);  // the column names
                continue;
            }
            if (!inside) continue;
            if (line.find("most loaded") != std::string::npos) break;
            rows.push_back(line);
        }
        return rows;
    }
};

}  // namespace

TEST_F(PipelineEstimateCli, PrintsOneRowPerStage) {
    struct Case {
        nlohmann::json pipeline;
        std::vector<std::string> blocks;  // each stage's, as the table writes them
    };
    const std::vector<Case> cases = {
        {{{"stages", 2}, {"micro_batches", 4}, {"partition", {3, 1}}}, {"0-2", "3"}},
        {{{"stages", 4}, {"schedule", "gpipe"}, {"micro_batches", 4}}, {"0", "1", "2", "3"}},
        {{{"stages", 2}, {"schedule", "interleaved"}, {"virtual_stages", 2}, {"micro_batches", 4}},
         {"0, 2", "1, 3"}},
    };
    for (const Case& c : cases) {
        const CommandResult r = estimate(config(c.pipeline));
        ASSERT_EQ(r.code, 0) << r.output;
        const std::vector<std::string> rows = stage_rows(r.output);
        ASSERT_EQ(rows.size(), c.blocks.size()) << r.output;
        for (size_t k = 0; k < rows.size(); ++k) {
            std::istringstream row(rows[k]);
            int stage = -1;
            row >> stage;
            EXPECT_EQ(stage, static_cast<int>(k)) << rows[k];
            // The blocks column: 14 wide after "  " and the 5-wide stage column.
            std::string blocks = rows[k].substr(8, 14);
            blocks.erase(blocks.find_last_not_of(' ') + 1);
            EXPECT_EQ(blocks, c.blocks[k]) << rows[k];
        }
        EXPECT_NE(r.output.find("most loaded: stage "), std::string::npos) << r.output;
    }
    // No pipeline, no table.
    const CommandResult r = estimate(config(nullptr));
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_EQ(r.output.find("per-stage"), std::string::npos) << r.output;
}

// --json: each stage's entry, its parameters the formula's (stage 0: wte, wpe and 3 blocks;
// stage 1: 1 block, ln_f and the head's copy of wte), activations of 1F1B's micro-batches in
// flight (p - stage of them), and the most loaded stage the one with the largest device total.
TEST_F(PipelineEstimateCli, JsonCarriesEachStage) {
    nlohmann::json j = config({{"stages", 2}, {"micro_batches", 4}, {"partition", {3, 1}}});
    const int64_t V = j["model"]["vocab_size"], T = j["model"]["seq_len"],
                  C = j["model"]["d_model"];
    const int64_t block = 12 * C * C + 13 * C;
    const CommandResult r = estimate(j, " --json");
    ASSERT_EQ(r.code, 0) << r.output;
    const nlohmann::json e = nlohmann::json::parse(r.output);
    ASSERT_TRUE(e.contains("stages")) << r.output;
    const nlohmann::json& st = e["stages"];
    ASSERT_EQ(st.size(), 2u);
    EXPECT_EQ(st[0]["param_count"].get<int64_t>(), V * C + T * C + 3 * block);
    EXPECT_EQ(st[1]["param_count"].get<int64_t>(), block + 2 * C + V * C);
    EXPECT_EQ(st[0]["blocks"], nlohmann::json({0, 1, 2}));
    EXPECT_EQ(st[1]["blocks"], nlohmann::json({3}));
    EXPECT_EQ(st[0]["in_flight"], 2);
    EXPECT_EQ(st[1]["in_flight"], 1);
    int most = 0;
    for (int k = 0; k < 2; ++k) {
        const nlohmann::json& d = st[k]["device"];
        // fp32 AdamW, no ZeRO: weights and gradients 4 bytes a parameter, m and v 8, each
        // buffer rounded up to 64 bytes.
        const int64_t p = st[k]["param_count"].get<int64_t>();
        const int64_t four = (4 * p + 63) / 64 * 64;
        EXPECT_EQ(d["params"].get<int64_t>(), four) << k;
        EXPECT_EQ(d["grads"].get<int64_t>(), four) << k;
        EXPECT_EQ(d["optimizer"].get<int64_t>(), 2 * four) << k;
        EXPECT_EQ(d["activations"], st[k]["activations"]["peak"]) << k;
        if (d["total"].get<int64_t>() > st[most]["device"]["total"].get<int64_t>()) most = k;
    }
    EXPECT_EQ(e["most_loaded_stage"], most);
    // The headline is the most loaded stage's: the larger parameter count.
    EXPECT_EQ(e["param_count"], st[0]["param_count"]);
}

// The budget check before the first step takes the most loaded stage with the micro-batches it
// holds in flight (1F1B: stage 0 keeps 2 of them), as `zerotrain estimate` prints it: a budget
// one byte under that stage's model state plus saved activations stops the run before any step
// (one micro-batch of the whole model would have let it start and fail inside a step), and a
// budget of the stage's whole device total trains.
TEST_F(PipelineEstimateCli, BudgetCheckTakesTheMostLoadedStageInFlight) {
    nlohmann::json j = config({{"stages", 2}, {"micro_batches", 4}, {"partition", {3, 1}}});
    j["steps"] = 2;
    const CommandResult r = estimate(j, " --json");
    ASSERT_EQ(r.code, 0) << r.output;
    const nlohmann::json e = nlohmann::json::parse(r.output);
    const nlohmann::json& s0 = e["stages"][0];
    ASSERT_EQ(s0["in_flight"], 2);
    const nlohmann::json& d = s0["device"];
    const int64_t certain = d["params"].get<int64_t>() + d["grads"].get<int64_t>() +
                            d["optimizer"].get<int64_t>() +
                            s0["activations"]["saved"].get<int64_t>();
    j["memory"]["budget_per_rank"] = certain - 1;
    const CommandResult refused = train_run(j, "tight", "", 2);
    EXPECT_EQ(refused.code, 2) << refused.output;
    EXPECT_NE(refused.output.find("out of memory before the first step"), std::string::npos)
        << refused.output;
    EXPECT_TRUE(step_lines("tight").empty());
    j["memory"]["budget_per_rank"] = d["total"].get<int64_t>() + 4096;
    const CommandResult ok = train_run(j, "fits", "", 2);
    ASSERT_EQ(ok.code, 0) << ok.output;
    EXPECT_EQ(step_lines("fits").size(), 2u);
}
