// The config-to-optimizer mapping (engine_options): the optimizer the CLI builds gets the config's
// hyperparameters exactly, in double, as the tested optimizer and PyTorch take them; rounding to
// float happens only where the update kernel rounds (issue 12).
#include <gtest/gtest.h>

#include "config_test_util.h"
#include "optim/adagrad.h"
#include "optim/adamw.h"
#include "optim/lion.h"
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

TEST(OptimizerConfig, AdagradHyperparametersExact) {
    EngineOptions eo = options_of(R"({"optimizer": {"type": "Adagrad", "params": {
        "lr": 0.05, "lr_decay": 1e-3, "eps": 1e-8, "weight_decay": 0.01,
        "initial_accumulator_value": 0.1}}})");
    auto* a = dynamic_cast<Adagrad*>(eo.optimizer.get());
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(a->name(), "Adagrad");
    EXPECT_EQ(a->options().lr_decay, 1e-3);
    EXPECT_EQ(a->options().eps, 1e-8);
    EXPECT_EQ(a->options().weight_decay, 0.01);
    EXPECT_EQ(a->options().initial_accumulator_value, 0.1);
    EXPECT_EQ(eo.lr, 0.05);
    EXPECT_EQ(a->state_names(), std::vector<std::string>{"sum"});
}

TEST(OptimizerConfig, AdagradAndLionDefaultsArePyTorchs) {
    EngineOptions ada = options_of(R"({"optimizer": {"type": "adagrad"}})");
    auto* a = dynamic_cast<Adagrad*>(ada.optimizer.get());
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(a->options().eps, 1e-10);  // torch.optim.Adagrad's, not Adam's 1e-8
    EXPECT_EQ(a->options().lr_decay, 0.0);
    EXPECT_EQ(a->options().initial_accumulator_value, 0.0);
    EXPECT_EQ(a->options().weight_decay, 0.0);
    EngineOptions lion = options_of(R"({"optimizer": {"type": "LION"}})");
    auto* l = dynamic_cast<Lion*>(lion.optimizer.get());
    ASSERT_NE(l, nullptr);
    EXPECT_EQ(l->options().beta1, 0.9);
    EXPECT_EQ(l->options().beta2, 0.99);  // lion-pytorch's, not Adam's 0.999
    EXPECT_EQ(l->options().weight_decay, 0.0);
}

TEST(OptimizerConfig, LionHyperparametersExact) {
    EngineOptions eo = options_of(R"({"optimizer": {"type": "Lion", "params": {
        "lr": 1e-4, "betas": [0.95, 0.98], "weight_decay": 1.0}}})");
    auto* l = dynamic_cast<Lion*>(eo.optimizer.get());
    ASSERT_NE(l, nullptr);
    EXPECT_EQ(l->name(), "Lion");
    EXPECT_EQ(l->options().beta1, 0.95);
    EXPECT_EQ(l->options().beta2, 0.98);
    EXPECT_EQ(l->options().weight_decay, 1.0);
    EXPECT_EQ(eo.lr, 1e-4);
    EXPECT_EQ(l->state_names(), std::vector<std::string>{"exp_avg"});
}

// A key of another optimizer is an error, as the optimizer's constructor would raise one.
TEST(OptimizerConfig, ForeignKeysOfAdagradAndLionRefused) {
    using zt::testing::error_of;
    using zt::testing::expect_mentions;
    auto opt = [](const char* type, nlohmann::json params) {
        return nlohmann::json{{"optimizer", {{"type", type}, {"params", params}}}};
    };
    expect_mentions(error_of(opt("Lion", {{"eps", 1e-8}})),
                    {"optimizer.params.eps: not a parameter of Lion; remove it"});
    expect_mentions(error_of(opt("Lion", {{"lr_decay", 0.1}})),
                    {"optimizer.params.lr_decay: not a parameter of Lion"});
    expect_mentions(error_of(opt("Adagrad", {{"betas", {0.9, 0.99}}})),
                    {"optimizer.params.betas: not a parameter of Adagrad"});
    expect_mentions(error_of(opt("Adagrad", {{"momentum", 0.9}})),
                    {"optimizer.params.momentum: not a parameter of Adagrad"});
    expect_mentions(error_of(opt("AdamW", {{"initial_accumulator_value", 0.1}})),
                    {"optimizer.params.initial_accumulator_value: not a parameter of AdamW"});
    expect_mentions(error_of(opt("SGD", {{"lr_decay", 0.1}})),
                    {"optimizer.params.lr_decay: not a parameter of SGD"});
    expect_mentions(error_of(opt("Lion", {{"betas", {0.9, 1.5}}})),
                    {"optimizer.params.betas: expected values in [0, 1]"});
    expect_mentions(error_of(opt("Adagrad", {{"lr_decay", -1}})), {"optimizer.params.lr_decay"});
    expect_mentions(error_of(opt("Adagrad", {{"initial_accumulator_value", -0.5}})),
                    {"optimizer.params.initial_accumulator_value"});
    // A truly unknown key stays a warning.
    const ParsedConfig parsed = parse_config(opt("Lion", {{"foo", 1}}), 1);
    bool warned = false;
    for (const std::string& w : parsed.warnings)
        warned = warned || w.find("optimizer.params.foo: unknown key") != std::string::npos;
    EXPECT_TRUE(warned);
}

}  // namespace
}  // namespace zt
