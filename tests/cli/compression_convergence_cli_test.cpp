// Convergence of every gradient codec at its recommended setting (docs/compression.md,
// "Recommended settings": the same rows), on 2 ranks as threads: the default GPT example
// (examples/gpt-tiny.json: its model, AdamW and schedule, shortened to kGptSteps steps) and a
// small DLRM on synthetic click data (examples/dlrm-synthetic.json's model and AdamW, 400 steps
// of 256). The final loss is the evaluation loss after the last step (the same held-out batches
// for every run; one training step's loss moves by a few percent from batch to batch). A row
// documented as meeting the goal must end at most 2% above the uncompressed run; one documented
// as missing it must still miss it, so that the docs' table stays true. A start_step warm-up
// must give the uncompressed run's losses, bit for bit, up to step start_step + 1.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "cli/cli_fixture.h"

using zt::testing::Cli;
using zt::testing::CommandResult;

namespace {

constexpr int kGptSteps = 100;  // of the example's 600, with its schedule over 100

// A recommended setting: compression.gradients (null: 1-bit Adam, the optimizer), the warm-up
// (start_step, or 1-bit Adam's freeze_step) as a fraction of the run, and whether the docs say it
// ends within 2% of the uncompressed loss on each model.
struct Row {
    const char* name;
    nlohmann::json gradients;
    double warmup;
    bool meets_gpt, meets_dlrm;
    const char* exchange = nullptr;  // 1-bit Adam's optimizer.params.exchange (null: default)
};

const Row kRows[] = {
    {"bf16", {{"type", "bf16"}}, 0, true, true},
    {"fp16", {{"type", "fp16"}}, 0, true, true},
    {"int8", {{"type", "int8"}}, 0, true, true},
    {"fp8_e4m3", {{"type", "fp8_e4m3"}}, 0, true, true},
    {"fp8_e5m2", {{"type", "fp8_e5m2"}}, 0, true, true},
    {"int4", {{"type", "int4"}}, 0, true, true},
    {"topk", {{"type", "topk"}, {"ratio", 0.01}}, 0.1, false, true},
    {"onebit", {{"type", "onebit"}}, 0.2, false, true},
    {"powersgd", {{"type", "powersgd"}, {"rank", 4}}, 0, false, true},
    // The update exchange (the default) and the mask of unset variance (Notes [Update exchange],
    // [Unset variance]); DeepSpeed's momentum exchange diverges on DLRM (docs/compression.md).
    {"OneBitAdam", nullptr, 0.25, true, true},
    {"OneBitAdam_momentum", nullptr, 0.25, true, false, "momentum"},
};

class CompressionConvergenceCli : public Cli {
  protected:
    static nlohmann::json example(const std::string& file) {
        return nlohmann::json::parse(
            std::ifstream(std::string(ZT_SOURCE_DIR) + "/examples/" + file));
    }
    static nlohmann::json gpt() {
        nlohmann::json j = example("gpt-tiny.json");
        j["steps"] = kGptSteps;
        j["scheduler"]["params"]["total_num_steps"] = kGptSteps;
        j["eval_interval"] = kGptSteps;
        j["steps_per_print"] = 1;
        j["threads"] = 1;
        return j;
    }
    static nlohmann::json dlrm() {
        nlohmann::json j = example("dlrm-synthetic.json");
        j["train_micro_batch_size_per_gpu"] = 128;
        j["steps"] = 400;
        j["scheduler"]["params"] = {
            {"warmup_num_steps", 20}, {"total_num_steps", 400}, {"cos_min_ratio", 0.01}};
        j["data"]["records"] = 102400;
        j["data"]["eval_records"] = 16384;
        j["eval_interval"] = 400;
        j["eval_iters"] = 64;
        j["steps_per_print"] = 1;
        j["threads"] = 1;
        return j;
    }
    // The run's evaluation loss after its last step (NaN where it is null: a diverged run).
    double final_eval(const std::string& run) {
        std::ifstream f(dir_ / run / "metrics.jsonl");
        std::string line;
        double out = std::nan("");
        while (std::getline(f, line)) {
            const nlohmann::json j = nlohmann::json::parse(line);
            if (j.contains("eval_loss"))
                out = j["eval_loss"].is_number() ? j["eval_loss"].get<double>() : std::nan("");
        }
        return out;
    }
    // Trains the uncompressed run and every row on `base`; checks each against the docs.
    void check_rows(const nlohmann::json& base, const std::string& model, bool gpt_model) {
        const int64_t steps = base["steps"].get<int64_t>();
        const CommandResult p = train_run(base, "plain", "", 2);
        ASSERT_EQ(p.code, 0) << p.output;
        const double ref = final_eval("plain");
        const RunLog plain = read_run("plain");
        ASSERT_TRUE(std::isfinite(ref)) << "no evaluation ran";
        for (const Row& row : kRows) {
            nlohmann::json j = base;
            const auto warmup = static_cast<int64_t>(std::lround(row.warmup * steps));
            if (row.gradients.is_null()) {
                j["optimizer"]["type"] = "OneBitAdam";
                j["optimizer"]["params"]["freeze_step"] = warmup;
                if (row.exchange) j["optimizer"]["params"]["exchange"] = row.exchange;
                j.erase("gradient_clipping");  // 1-bit Adam forms no global gradient to clip
            } else {
                j["compression"]["gradients"] = row.gradients;
                if (warmup > 0) j["compression"]["gradients"]["start_step"] = warmup;
            }
            const CommandResult r = train_run(j, row.name, "", 2);
            ASSERT_EQ(r.code, 0) << row.name << ": " << r.output;
            const double got = final_eval(row.name);
            const bool meets = gpt_model ? row.meets_gpt : row.meets_dlrm;
            std::printf("[ converge ] %s %s: eval loss %.5f against %.5f (%+.2f%%)%s\n",
                        model.c_str(), row.name, got, ref, 100 * (got / ref - 1),
                        meets ? "" : ", documented as missing 2%");
            // Lower is no failure: the goal is "no worse than 2% above".
            if (meets) {
                EXPECT_LE(got, 1.02 * ref) << model << " " << row.name;
            } else {
                EXPECT_FALSE(got <= 1.02 * ref)
                    << model << " " << row.name << " now meets 2%: update docs/compression.md";
            }
            const nlohmann::json c = step_lines(row.name).back()["compression"];
            const nlohmann::json g = c.contains("gradients") ? c["gradients"] : c["momentum"];
            if (std::isfinite(got)) {  // a diverged step (skipped) exchanges nothing
                EXPECT_GT(g.value("ratio", 0.0), 1.9) << row.name << ": the last step compressed";
            }
            if (row.gradients.is_null() || warmup == 0) continue;
            // The warm-up: the plain collectives, so the uncompressed run's bits up to the first
            // loss computed after a compressed step.
            const RunLog got_log = read_run(row.name);
            const size_t w = static_cast<size_t>(warmup);
            ASSERT_EQ(got_log.loss.size(), plain.loss.size()) << row.name;
            for (size_t i = 0; i <= w; ++i)
                ASSERT_EQ(got_log.loss[i], plain.loss[i]) << row.name << " step " << i + 1;
            EXPECT_NE(got_log.loss[w + 1], plain.loss[w + 1]) << row.name;
        }
    }
};

}  // namespace

TEST_F(CompressionConvergenceCli, GptExample) { check_rows(gpt(), "gpt", true); }

TEST_F(CompressionConvergenceCli, SmallDlrm) { check_rows(dlrm(), "dlrm", false); }
