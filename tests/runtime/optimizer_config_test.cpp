// The config-to-optimizer mapping (engine_options): the optimizer the CLI builds gets the config's
// hyperparameters exactly, in double, as the tested optimizer and PyTorch take them; rounding to
// float happens only where the update kernel rounds (issue 12).
#include <gtest/gtest.h>

#include "optim/adamw.h"
#include "optim/sgd.h"
#include "runtime/config.h"
#include "runtime/trainer.h"

namespace zt {
namespace {

EngineOptions options_of(const std::string& config) {
    return engine_options(parse_config(nlohmann::json::parse(config), 1).config);
}

TEST(OptimizerConfig, AdamWHyperparametersExact) {
    EngineOptions eo = options_of(R"({"optimizer": {"type": "AdamW", "params": {
        "lr": 3e-4, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.1}}})");
    auto* a = dynamic_cast<AdamW*>(eo.optimizer.get());
    ASSERT_NE(a, nullptr);
    const AdamWOptions& o = a->options();
    EXPECT_EQ(o.beta1, 0.9);
    EXPECT_EQ(o.beta2, 0.999);
    EXPECT_EQ(o.eps, 1e-8);
    EXPECT_EQ(o.weight_decay, 0.1);
    EXPECT_TRUE(o.adam_w_mode);
    EXPECT_TRUE(o.bias_correction);
    EXPECT_EQ(eo.lr, 3e-4);
    // PyTorch computes 1 - beta2 in double from the Python float 0.999 (then rounds to the
    // tensor's float once); a beta2 rounded to float first is off by 1.3e-5 relative.
    EXPECT_EQ(1.0 - o.beta2, 1.0 - 0.999);
    EXPECT_EQ(static_cast<float>(1.0 - o.beta2), static_cast<float>(1.0 - 0.999));
    EXPECT_NE(static_cast<float>(1.0 - static_cast<double>(static_cast<float>(0.999))),
              static_cast<float>(1.0 - 0.999));  // what the float round trip gave
}

TEST(OptimizerConfig, AdamWithL2AndNoBiasCorrection) {
    EngineOptions eo = options_of(R"({"optimizer": {"type": "Adam", "params": {
        "adam_w_mode": false, "bias_correction": false, "betas": [0.8, 0.95],
        "eps": 1e-6, "weight_decay": 0.01}}})");
    auto* a = dynamic_cast<AdamW*>(eo.optimizer.get());
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(a->name(), "Adam");
    EXPECT_FALSE(a->options().adam_w_mode);
    EXPECT_FALSE(a->options().bias_correction);
    EXPECT_EQ(a->options().beta1, 0.8);
    EXPECT_EQ(a->options().beta2, 0.95);
    EXPECT_EQ(a->options().eps, 1e-6);
    EXPECT_EQ(a->options().weight_decay, 0.01);
}

TEST(OptimizerConfig, SgdHyperparametersExact) {
    EngineOptions eo = options_of(R"({"optimizer": {"type": "SGD", "params": {
        "lr": 0.1, "momentum": 0.9, "nesterov": true, "weight_decay": 1e-4}}})");
    auto* s = dynamic_cast<Sgd*>(eo.optimizer.get());
    ASSERT_NE(s, nullptr);
    EXPECT_EQ(s->options().momentum, 0.9);
    EXPECT_TRUE(s->options().nesterov);
    EXPECT_EQ(s->options().weight_decay, 1e-4);
    EXPECT_EQ(eo.lr, 0.1);
}

}  // namespace
}  // namespace zt
