// Every config error at once, each with its key (Note [Config errors] in config_section.h); keys
// that change nothing warn (issue 12, "Keys and docs"); stage3_prefetch_bucket_size 0 turns
// prefetch off.
#include <gtest/gtest.h>

#include "runtime/config.h"
#include "runtime/config_test_util.h"
#include "runtime/trainer.h"

namespace zt {
namespace {

using testing::error_of;
using testing::expect_mentions;

size_t count_of(const std::string& s, const std::string& part) {
    size_t n = 0;
    for (size_t at = s.find(part); at != std::string::npos; at = s.find(part, at + 1)) ++n;
    return n;
}

// A Hugging Face Trainer-style config: "auto" wherever HF fills a value in. zerotrain resolves
// the batch, the ZeRO sizes and the scheduler's lrs and length; the rest must each be named.
TEST(ConfigErrors, EveryUnresolvableAutoNamedAtOnce) {
    const nlohmann::json j = nlohmann::json::parse(R"({
        "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
        "gradient_accumulation_steps": "auto", "gradient_clipping": "auto",
        "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto",
                                                   "weight_decay": "auto"}},
        "scheduler": {"type": "WarmupDecayLR",
                      "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto",
                                 "warmup_num_steps": "auto", "total_num_steps": "auto"}},
        "fp16": {"enabled": "auto"},
        "zero_optimization": {"stage": 2, "reduce_bucket_size": "auto",
                              "stage3_prefetch_bucket_size": "auto"}
    })");
    const std::string e = error_of(j);
    expect_mentions(e, {"7 errors", "gradient_clipping: \"auto\"", "optimizer.params.lr: \"auto\"",
                        "optimizer.params.betas: \"auto\"", "optimizer.params.eps: \"auto\"",
                        "optimizer.params.weight_decay: \"auto\"",
                        "scheduler.params.warmup_num_steps: \"auto\"", "fp16.enabled: \"auto\""});
    EXPECT_EQ(count_of(e, "\n  "), 7u) << e;  // one line per error
}

TEST(ConfigErrors, ErrorsOfDifferentSectionsAllReported) {
    const nlohmann::json j = nlohmann::json::parse(R"({
        "steps": 0, "seed": -1,
        "model": {"n_heads": "four", "d_model": 64},
        "data": {"type": "tokens"},
        "optimizer": {"type": "Lamb"},
        "zero_optimization": {"stage": 7},
        "checkpoint": {"on_error": "retry"},
        "amp": {"enabled": true}
    })");
    const std::string e = error_of(j);
    expect_mentions(
        e, {"8 errors", "steps:", "seed:", "model.n_heads:", "data.path:", "optimizer.type:",
            "zero_optimization.stage:", "checkpoint.on_error:", "amp.enabled:"});
}

TEST(ConfigErrors, OneErrorReadsAsBefore) {
    const std::string e = error_of({{"steps", 0}});
    EXPECT_EQ(e, "steps: expected an integer >= 1, got 0");
}

TEST(ConfigErrors, ErrorsInsideOneSectionAllReported) {
    const std::string e = error_of(
        {{"optimizer", {{"type", "AdamW"}, {"params", {{"lr", -1}, {"eps", "x"}, {"betas", 3}}}}},
         {"train_batch_size", "x"},
         {"train_micro_batch_size_per_gpu", 0}});
    expect_mentions(
        e, {"5 errors", "optimizer.params.lr", "optimizer.params.eps", "optimizer.params.betas",
            "train_batch_size", "train_micro_batch_size_per_gpu"});
}

std::vector<std::string> warnings_of(const nlohmann::json& j) {
    return parse_config(j, 1).warnings;
}

bool warned(const std::vector<std::string>& w, const std::string& key) {
    for (const std::string& s : w)
        if (s.rfind(key + ":", 0) == 0 && s.find("no effect") != std::string::npos) return true;
    return false;
}

TEST(ConfigErrors, KeysThatChangeNothingWarn) {
    const nlohmann::json j = nlohmann::json::parse(R"({
        "optimizer": {"type": "Adam", "params": {"torch_adam": true}},
        "zero_allow_untested_optimizer": true, "zero_force_ds_cpu_optimizer": false,
        "zero_allow_comm_data_type_fp32": true
    })");
    const std::vector<std::string> w = warnings_of(j);
    EXPECT_TRUE(warned(w, "optimizer.params.torch_adam"));
    EXPECT_TRUE(warned(w, "zero_allow_untested_optimizer"));
    EXPECT_TRUE(warned(w, "zero_force_ds_cpu_optimizer"));
    EXPECT_TRUE(warned(w, "zero_allow_comm_data_type_fp32"));
    EXPECT_TRUE(warnings_of(nlohmann::json::object()).empty());
    expect_mentions(error_of({{"zero_allow_untested_optimizer", "yes"}}),
                    {"zero_allow_untested_optimizer: expected true or false"});
}

// docs/parallel.md: 0 turns prefetch off; the engine gets 0 and prefetch_after() does nothing.
TEST(ConfigErrors, PrefetchBucketSizeZeroTurnsPrefetchOff) {
    const TrainConfig c =
        parse_config({{"zero_optimization", {{"stage", 3}, {"stage3_prefetch_bucket_size", 0}}}}, 1)
            .config;
    EXPECT_EQ(c.zero.stage3_prefetch_bucket_size, 0);
    EXPECT_EQ(engine_options(c).zero.prefetch_bucket_size, 0);
    expect_mentions(error_of({{"zero_optimization", {{"stage3_prefetch_bucket_size", -1}}}}),
                    {"zero_optimization.stage3_prefetch_bucket_size: expected an integer >= 0"});
}

}  // namespace
}  // namespace zt
