// The planner's configs: a layout written into a config (with_strategy) parses back to the same
// layout (what `train --auto` runs is what the planner costed), the config's own refusals come
// back as the search's reasons, and plan_input's base is the one-rank view of any config.
#include "runtime/plan_config.h"

#include <gtest/gtest.h>

#include "planner/search.h"

namespace zt {
namespace {

nlohmann::json tiny_config() {
    return {{"train_batch_size", 8},
            {"train_micro_batch_size_per_gpu", 2},
            {"steps", 2},
            {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 1e-3}}}}},
            {"model",
             {{"type", "gpt"},
              {"vocab_size", 64},
              {"seq_len", 16},
              {"d_model", 16},
              {"n_layers", 4},
              {"n_heads", 2}}},
            {"data", {{"type", "builtin"}, {"builtin_tokens", 4096}}},
            {"threads", 1}};
}

TEST(PlanConfig, EveryAcceptedLayoutParsesBackToItself) {
    const nlohmann::json j = tiny_config();
    const PlanInput in = plan_input(j, 4, 1, "local");
    EXPECT_EQ(in.base.global_batch, 8);
    EXPECT_GT(in.base.param_tensors, 0);
    SearchSpace space;
    space.ranks = 4;
    int accepted = 0, refused = 0;
    for (const Strategy& s : enumerate_layouts(in.base, space)) {
        const std::string why = config_refuses(in.config, s, 8);
        if (!why.empty()) {
            ++refused;
            continue;
        }
        ++accepted;
        const TrainConfig cfg =
            parse_config(with_strategy(in.config, s, 8), int64_t{s.dp} * s.tp * s.pp).config;
        EXPECT_EQ(strategy_of(cfg), s) << strategy_label(s);
        EXPECT_EQ(cfg.train_batch_size, 8);
    }
    std::printf("4 ranks: %d layouts accepted, %d refused by the config\n", accepted, refused);
    EXPECT_GT(accepted, 50);
}

TEST(PlanConfig, RefusalIsTheConfigsOwnMessage) {
    Strategy s;
    s.tp = 4;  // 2 heads
    s.micro_batch = 8;
    const std::string why = config_refuses(tiny_config(), s, 8);
    EXPECT_NE(why.find("parallel.tensor"), std::string::npos) << why;
}

}  // namespace
}  // namespace zt
