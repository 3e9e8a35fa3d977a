// optimizer.type "OneBitAdam" in the config (docs/compression.md, "1-bit Adam"): DeepSpeed's
// parameters and defaults, the keys that change nothing here are warnings that say why, and what
// 1-bit Adam does not compose with is refused before anything runs.
#include <gtest/gtest.h>

#include "config_test_util.h"

namespace zt {
namespace {

using nlohmann::json;
using testing::error_of;
using testing::expect_mentions;

json onebit(json params) { return {{"optimizer", {{"type", "OneBitAdam"}, {"params", params}}}}; }

TEST(ConfigOneBitAdam, DeepSpeedsParametersAndDefaults) {
    const ParsedConfig d = parse_config(onebit(json::object()));
    EXPECT_EQ(d.config.optimizer.type, "OneBitAdam");
    EXPECT_EQ(d.config.optimizer.freeze_step, 100000);  // DeepSpeed's default
    EXPECT_FALSE(d.config.optimizer.bias_correction);
    EXPECT_TRUE(d.config.optimizer.onebit_exchange_update);  // zerotrain's default exchange
    EXPECT_FALSE(parse_config(onebit({{"exchange", "momentum"}}))
                     .config.optimizer.onebit_exchange_update);  // DeepSpeed's
    const ParsedConfig p = parse_config({{"optimizer",
                                          {{"type", "onebitadam"},  // any case, as DeepSpeed
                                           {"params",
                                            {{"lr", 4e-4},
                                             {"freeze_step", 23000},
                                             {"betas", {0.8, 0.98}},
                                             {"eps", 1e-6},
                                             {"weight_decay", 0.01},
                                             {"cuda_aware", false},
                                             {"comm_backend_name", "nccl"},
                                             {"bias_correction", true}}}}}});
    const OptimizerConfig& o = p.config.optimizer;
    EXPECT_EQ(o.type, "OneBitAdam");
    EXPECT_EQ(o.freeze_step, 23000);
    EXPECT_DOUBLE_EQ(o.lr, 4e-4);
    EXPECT_DOUBLE_EQ(o.beta1, 0.8);
    EXPECT_DOUBLE_EQ(o.beta2, 0.98);
    EXPECT_DOUBLE_EQ(o.eps, 1e-6);
    EXPECT_DOUBLE_EQ(o.weight_decay, 0.01);
    std::string all;
    for (const std::string& w : p.warnings) all += w + "\n";
    expect_mentions(all, {"optimizer.params.cuda_aware: has no effect",
                          "optimizer.params.comm_backend_name: \"nccl\" has no effect",
                          "optimizer.params.bias_correction: has no effect"});
}

TEST(ConfigOneBitAdam, BadParametersAreRefused) {
    expect_mentions(error_of(onebit({{"freeze_step", -1}})), {"optimizer.params.freeze_step"});
    expect_mentions(error_of(onebit({{"max_grad_norm", 1.0}})),
                    {"optimizer.params.max_grad_norm", "cannot be clipped"});
    expect_mentions(error_of(onebit({{"amsgrad", true}})), {"optimizer.params.amsgrad"});
    expect_mentions(error_of(onebit({{"eps_inside_sqrt", true}})),
                    {"optimizer.params.eps_inside_sqrt"});
    expect_mentions(error_of(onebit({{"adam_w_mode", false}})),
                    {"optimizer.params.adam_w_mode: not a parameter of OneBitAdam"});
    expect_mentions(error_of(onebit({{"momentum", 0.9}})),
                    {"optimizer.params.momentum: not a parameter of OneBitAdam"});
    expect_mentions(error_of(onebit({{"exchange", "gradient"}})),
                    {"optimizer.params.exchange", "update", "momentum"});
    // 1-bit Adam's keys under another optimizer.
    expect_mentions(
        error_of({{"optimizer", {{"type", "AdamW"}, {"params", {{"freeze_step", 10}}}}}}),
        {"optimizer.params.freeze_step: not a parameter of AdamW"});
}

TEST(ConfigOneBitAdam, LayoutsItDoesNotComposeWithAreRefused) {
    auto with = [](json extra) {
        json j = onebit({{"freeze_step", 10}});
        j.update(extra);
        return j;
    };
    expect_mentions(error_of(with({{"zero_optimization", {{"stage", 1}}}}), 2),
                    {"OneBitAdam", "zero_optimization.stage 0"});
    expect_mentions(error_of(with({{"gradient_clipping", 1.0}})),
                    {"OneBitAdam", "gradient_clipping"});
    expect_mentions(error_of(with({{"fp16", {{"enabled", true}}}})), {"OneBitAdam", "fp16"});
    expect_mentions(error_of(with({{"compression", {{"gradients", {{"type", "int8"}}}}}}), 2),
                    {"OneBitAdam", "remove compression.gradients"});
    expect_mentions(error_of(with({{"parallel", {{"tensor", 2}}}}), 2),
                    {"OneBitAdam", "tensor and pipeline parallelism"});
    expect_mentions(
        error_of(with({{"zero_optimization", {{"offload_optimizer", {{"device", "cpu"}}}}}})),
        {"OneBitAdam", "offload_optimizer"});
    // What it composes with parses.
    EXPECT_EQ(error_of(with({{"bf16", {{"enabled", true}}}}), 2), "(no error)");
}

}  // namespace
}  // namespace zt
