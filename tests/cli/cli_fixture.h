// Test fixture for the zerotrain binary: a fresh directory per test and a tiny config.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "run_command.h"

namespace zt::testing {

namespace fs = std::filesystem;

class Cli : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() /
               ("zt_cli_" + std::to_string(::getpid()) + "_" +
                ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::remove_all(dir_);
        fs::create_directories(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }
    std::string write_config(const nlohmann::json& j, const std::string& name = "c.json") {
        std::string path = (dir_ / name).string();
        std::ofstream(path) << j.dump(2);
        return path;
    }
    static nlohmann::json tiny() {
        return {{"train_micro_batch_size_per_gpu", 2},
                {"steps", 3},
                {"steps_per_print", 1},
                {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 1e-3}}}}},
                {"model",
                 {{"type", "gpt"}, {"vocab_size", 64}, {"seq_len", 16}, {"d_model", 16},
                  {"n_layers", 1}, {"n_heads", 2}}},
                {"data", {{"type", "builtin"}, {"builtin_tokens", 4096}, {"eval_fraction", 0.1}}},
                {"eval_interval", 2},
                {"eval_iters", 1},
                {"threads", 1}};
    }
    fs::path dir_;
};


}  // namespace zt::testing
