// Test fixture for the zerotrain binary: a fresh directory per test and a tiny config.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "checkpoint/safetensors.h"
#include "run_command.h"

namespace zt::testing {

namespace fs = std::filesystem;

// The environment of an mpirun test: root allowed (this container), one passive thread per rank.
constexpr const char* kMpiEnv =
    "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 "
    "OMP_WAIT_POLICY=passive ";

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
    // `zerotrain train` of config j in run directory dir_/run (config written beside it), quiet,
    // with `ranks` ranks as threads when above 1.
    CommandResult train_run(const nlohmann::json& j, const std::string& run,
                            const std::string& args, int ranks = 1) {
        const std::string cfg = write_config(j, run + ".json");
        return run_zerotrain("train " + cfg + " --quiet --run-dir " + (dir_ / run).string() +
                             (ranks > 1 ? " --ranks " + std::to_string(ranks) : "") + " " + args);
    }
    // A run's losses by step (1-based step at index step - 1; NaN where absent) and its final
    // weights, every tensor of model.safetensors in file order (empty without the file).
    struct RunLog {
        std::vector<double> loss;
        std::vector<float> weights;
    };
    RunLog read_run(const std::string& run);
    // The step lines (those with a loss) of a run's metrics.jsonl, in order.
    std::vector<nlohmann::json> step_lines(const std::string& run) {
        std::vector<nlohmann::json> out;
        std::ifstream f(dir_ / run / "metrics.jsonl");
        std::string line;
        while (std::getline(f, line)) {
            auto j = nlohmann::json::parse(line);
            if (j.contains("loss")) out.push_back(std::move(j));
        }
        return out;
    }
    // Trains j on 2 ranks as threads (run "threads") and under mpirun (run "mpi"): both run
    // `steps` steps and end with the same losses and weights, bit for bit.
    void expect_threads_equal_mpirun(const nlohmann::json& j, size_t steps);
    // `zerotrain train` of config j under `mpirun -np np` (one thread per rank), quiet, in run
    // directory dir_/run.
    CommandResult mpirun_train(const nlohmann::json& j, const std::string& run, int np = 2) {
        const std::string cfg = write_config(j, run + ".json");
        return run_command(std::string(kMpiEnv) +
                           "timeout 120 mpirun --oversubscribe --mca btl self,vader -np " +
                           std::to_string(np) + " " + ZT_BINARY + " train " + cfg +
                           " --quiet --run-dir " + (dir_ / run).string());
    }
    // The equivalence rule's comparison of two runs (DESIGN.md): the largest relative difference
    // of the losses and absolute difference of the weights.
    static double max_rel(const std::vector<double>& a, const std::vector<double>& b) {
        double m = 0;
        for (size_t i = 0; i < a.size(); ++i)
            m = std::max(m, std::abs(a[i] - b[i]) / std::max(std::abs(b[i]), 1e-12));
        return m;
    }
    static double max_abs(const std::vector<float>& a, const std::vector<float>& b) {
        double m = 0;
        for (size_t i = 0; i < a.size(); ++i)
            m = std::max(m, static_cast<double>(std::abs(a[i] - b[i])));
        return m;
    }
    // Losses at every step within 1e-4 relative and the weights within 1e-4 (fp32); printed.
    static void expect_close(const RunLog& got, const RunLog& ref, const std::string& what) {
        ASSERT_EQ(got.loss.size(), ref.loss.size()) << what;
        ASSERT_EQ(got.weights.size(), ref.weights.size()) << what;
        EXPECT_LE(max_rel(got.loss, ref.loss), 1e-4) << what;
        EXPECT_LE(max_abs(got.weights, ref.weights), 1e-4) << what;
        std::printf("%s: loss %.2e, weights %.2e\n", what.c_str(), max_rel(got.loss, ref.loss),
                    max_abs(got.weights, ref.weights));
    }
    static nlohmann::json tiny() {
        return {{"train_micro_batch_size_per_gpu", 2},
                {"steps", 3},
                {"steps_per_print", 1},
                {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 1e-3}}}}},
                {"model",
                 {{"type", "gpt"},
                  {"vocab_size", 64},
                  {"seq_len", 16},
                  {"d_model", 16},
                  {"n_layers", 1},
                  {"n_heads", 2}}},
                {"data", {{"type", "builtin"}, {"builtin_tokens", 4096}, {"eval_fraction", 0.1}}},
                {"eval_interval", 2},
                {"eval_iters", 1},
                {"threads", 1}};
    }
    // tiny() as the compression tests train it: 8 samples a step in 2 micro-steps of `micro` per
    // rank, 2 layers, buckets of 2000 elements (several per step, uneven over the ranks),
    // clipping at 0.5 (a global norm of the decoded gradients), ZeRO `stage`, no evaluation.
    static nlohmann::json bucketed(int steps, int micro, int stage) {
        nlohmann::json j = tiny();
        j["steps"] = steps;
        j["train_batch_size"] = 8;
        j["gradient_accumulation_steps"] = 2;
        j["train_micro_batch_size_per_gpu"] = micro;
        j["model"]["n_layers"] = 2;
        j["data"]["builtin_tokens"] = 1 << 15;
        j["eval_interval"] = 0;
        j["gradient_clipping"] = 0.5;
        j["optimizer"]["params"] = {{"lr", 3e-3}, {"weight_decay", 0.1}};
        j["zero_optimization"] = {{"stage", stage},
                                  {"reduce_bucket_size", 2000},
                                  {"allgather_bucket_size", 3000},
                                  {"stage3_param_persistence_threshold", 100}};
        return j;
    }
    fs::path dir_;
};

inline void Cli::expect_threads_equal_mpirun(const nlohmann::json& j, size_t steps) {
    const CommandResult t = train_run(j, "threads", "", 2);
    ASSERT_EQ(t.code, 0) << t.output;
    const CommandResult m = mpirun_train(j, "mpi");
    ASSERT_EQ(m.code, 0) << m.output;
    const RunLog a = read_run("threads"), b = read_run("mpi");
    ASSERT_EQ(a.loss.size(), steps);
    EXPECT_EQ(a.loss, b.loss);
    EXPECT_EQ(a.weights, b.weights);
}

inline Cli::RunLog Cli::read_run(const std::string& run) {
    RunLog r;
    std::ifstream f(dir_ / run / "metrics.jsonl");
    std::string line;
    while (std::getline(f, line)) {
        auto j = nlohmann::json::parse(line);
        if (!j.contains("loss")) continue;
        const size_t step = j["step"].get<size_t>();
        if (r.loss.size() < step) r.loss.resize(step, std::nan(""));
        r.loss[step - 1] = j["loss"];
    }
    if (fs::exists(dir_ / run / "model.safetensors")) {
        SafetensorsFile w((dir_ / run / "model.safetensors").string());
        for (const auto& t : w.tensors()) {
            std::vector<float> v(static_cast<size_t>(t.numel));
            w.read_f32(t.name, v.data(), t.numel);
            r.weights.insert(r.weights.end(), v.begin(), v.end());
        }
    }
    return r;
}

}  // namespace zt::testing
