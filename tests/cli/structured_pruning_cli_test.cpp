// Structured pruning and compact export as a user runs them (docs/pruning.md): a run with
// "type": "structured" reports heads and channels pruned per the schedule and its exported
// weights hold whole zero heads and channels; `export --compact` writes a smaller model and a
// config that `zerotrain train` trains, whose first loss is the masked model's; what structured
// pruning does not support is refused before any work.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "checkpoint/safetensors.h"
#include "cli/cli_fixture.h"
#include "compression/prune_mask.h"
#include "compression/prune_schedule.h"

using zt::testing::Cli;
using zt::testing::CommandResult;
namespace fs = std::filesystem;

namespace {

class StructuredCli : public Cli {
  protected:
    // 2 layers of d_model 16, 4 heads of 4, d_ff 64; 8 samples a step.
    nlohmann::json config(int steps) {
        nlohmann::json j = tiny();
        j["steps"] = steps;
        j["train_batch_size"] = 8;
        j["train_micro_batch_size_per_gpu"] = 4;
        j["model"]["n_layers"] = 2;
        j["model"]["n_heads"] = 4;
        j["data"]["builtin_tokens"] = 1 << 14;
        j["eval_interval"] = 0;
        j["optimizer"]["params"] = {{"lr", 3e-3}, {"weight_decay", 0.1}};
        j["compression"]["pruning"] = {{"type", "structured"}, {"heads", 0.5},  {"channels", 0.3},
                                       {"start_step", 2},      {"end_step", 4}, {"frequency", 2}};
        return j;
    }
    static zt::PruningOptions options() {
        zt::PruningOptions p;
        p.type = "structured";
        p.heads = 0.5;
        p.channels = 0.3;
        p.start_step = 2;
        p.end_step = 4;
        p.frequency = 2;
        return p;
    }
};

}  // namespace

TEST_F(StructuredCli, MetricsFollowTheScheduleAndCompactExportTrainsTheSameModel) {
    ASSERT_EQ(train_run(config(6), "run", "", 2).code, 0);
    // Metrics: the formula's heads and channels per layer after each update.
    std::ifstream f(dir_ / "run" / "metrics.jsonl");
    std::string line;
    int64_t heads = 0, channels = 0, lines = 0;
    const zt::PruningOptions p = options();
    while (std::getline(f, line)) {
        const nlohmann::json j = nlohmann::json::parse(line);
        if (!j.contains("loss")) continue;
        const int64_t step = j["step"];
        if (zt::prune_updates_at(p, step)) {
            heads = zt::prune_count(zt::prune_heads_at(p, step), 4);
            channels = zt::prune_count(zt::prune_channels_at(p, step), 64);
        }
        EXPECT_EQ(j["pruning"]["heads"]["pruned"].get<int64_t>(), heads) << line;
        EXPECT_EQ(j["pruning"]["channels"]["pruned"].get<int64_t>(), channels) << line;
        ++lines;
    }
    EXPECT_EQ(lines, 6);
    EXPECT_EQ(heads, 2);
    EXPECT_EQ(channels, 19);

    // export --compact: the smaller weights and a config beside them.
    const std::string cfg = write_config(config(6), "run_cfg.json");
    const std::string out = (dir_ / "small.safetensors").string();
    const CommandResult e = zt::testing::run_zerotrain(
        "export " + cfg + " --from " + (dir_ / "run").string() + " --compact --out " + out);
    ASSERT_EQ(e.code, 0) << e.output;
    EXPECT_NE(e.output.find("removed 2 of 4 heads and 19 of 64 MLP channels"), std::string::npos)
        << e.output;
    nlohmann::json small;
    std::ifstream(dir_ / "small.config.json") >> small;
    EXPECT_EQ(small["model"]["n_heads"], 2);
    EXPECT_EQ(small["model"]["head_dim"], 4);
    EXPECT_EQ(small["model"]["d_ff"], 45);
    EXPECT_FALSE(small.contains("compression"));
    EXPECT_EQ(small["init_from"], fs::absolute(out).string());
    zt::SafetensorsFile w(out);
    for (int l = 0; l < 2; ++l) {
        const std::string h = "transformer.h." + std::to_string(l);
        EXPECT_EQ(w.find(h + ".attn.c_attn.weight")->shape, (std::vector<int64_t>{24, 16}));
        EXPECT_EQ(w.find(h + ".attn.c_proj.weight")->shape, (std::vector<int64_t>{16, 8}));
        EXPECT_EQ(w.find(h + ".mlp.c_fc.weight")->shape, (std::vector<int64_t>{45, 16}));
        EXPECT_EQ(w.find(h + ".mlp.c_proj.weight")->shape, (std::vector<int64_t>{16, 45}));
    }

    // The first step's loss (before its update) of the masked weights in the dense config and of
    // the compact model in its config: the same function, within fp32 rounding.
    nlohmann::json masked = config(1);
    masked.erase("compression");
    masked["init_from"] = (dir_ / "run" / "model.safetensors").string();
    ASSERT_EQ(train_run(masked, "masked", "").code, 0);
    small["steps"] = 1;
    const CommandResult c = train_run(small, "compact", "");
    ASSERT_EQ(c.code, 0) << c.output;
    const double a = read_run("masked").loss.at(0), b = read_run("compact").loss.at(0);
    EXPECT_NEAR(b, a, 1e-5 * a);
    std::printf("masked %.8f compact %.8f\n", a, b);
}

TEST_F(StructuredCli, WhatDoesNotPruneStructurallyIsRefused) {
    struct Case {
        nlohmann::json pruning;
        const char* says;
    };
    const std::vector<Case> cases = {
        {{{"type", "structured"}}, "needs a fraction of heads or channels"},
        {{{"type", "structured"}, {"heads", 1.0}}, "expected a fraction below 1"},
        {{{"type", "structured"}, {"final_sparsity", 0.3}, {"params", {"mlp"}}},
         "not used by structured pruning"},
        {{{"type", "structured"}, {"final_sparsity", 0.3}, {"scope", "layer"}},
         "not used by structured pruning"},
    };
    for (const Case& c : cases) {
        nlohmann::json j = config(3);
        j["compression"]["pruning"] = c.pruning;
        const CommandResult r = train_run(j, "bad", "");
        EXPECT_EQ(r.code, 2) << c.pruning.dump() << r.output;
        EXPECT_NE(r.output.find(c.says), std::string::npos) << c.pruning.dump() << r.output;
        EXPECT_FALSE(fs::exists(dir_ / "bad" / "model.safetensors"));
    }
    // --compact with --quantize, and on a model without heads to remove (DLRM, refused by the
    // family), are input errors too.
    const std::string cfg = write_config(config(3), "c.json");
    const CommandResult q = zt::testing::run_zerotrain(
        "export " + cfg + " --compact --quantize int8 --out " + (dir_ / "x.safetensors").string());
    EXPECT_EQ(q.code, 2) << q.output;
    EXPECT_NE(q.output.find("--compact and --quantize"), std::string::npos) << q.output;
}
