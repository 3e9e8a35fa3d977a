// Subcommands of `zerotrain`: each registers its options on the CLI11 app and runs when chosen.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace zt {
struct TrainOptions;
class Engine;
}

namespace zt::cli {

struct ConfigArgs {
    std::string path;
    std::vector<std::string> sets;  // --set a.b=v
};

// `zerotrain estimate` options beyond the config's (cli/estimate.cpp).
struct EstimateArgs {
    int64_t ranks = 1;              // data-parallel ranks to estimate for
    int zero_stage = -1;            // -1: zero_optimization.stage of the config
    std::string offload_optimizer;  // "none" or "cpu"; empty: the config's
    bool json = false;
};

class Commands {
public:
    void add_to(CLI::App& app);
    int run();  // runs the chosen subcommand; returns the exit code

private:
    void add_train(CLI::App& app);
    void add_estimate(CLI::App& app);
    void add_export(CLI::App& app);
    void add_checkpoint(CLI::App& app);
    void add_data(CLI::App& app);
    void add_bench(CLI::App& app);
    // Runs `train` on the ranks the config and launcher give (Note [Starting ranks]).
    void train_on_ranks(const nlohmann::json& j, const TrainOptions& opts);

    std::function<int()> chosen_;
    std::vector<std::pair<CLI::App*, std::function<int()>>> runners_;

    ConfigArgs config_;
    EstimateArgs estimate_;
    std::string run_dir_;
    int threads_ = 0;
    int ranks_ = 0;
    std::string resume_;
    bool overwrite_ = false;
    CLI::App* sub_train_ = nullptr;
    std::string memory_budget_;
    std::string memory_timeline_;
    bool quiet_ = false;
    std::string out_path_;
    std::string from_run_;
    std::string in_path_;
    std::string token_dtype_ = "uint16";
    std::string weight_dtype_ = "f32";
    std::string bench_out_;
};

}  // namespace zt::cli

namespace zt::cli {
// `zerotrain checkpoint inspect DIR` (cli/checkpoint_cmd.cpp).
int inspect_checkpoint(const std::string& dir, bool json);
// The master weights of a checkpoint (DIR as inspect_checkpoint takes it) into the engine, from
// whatever layout wrote it.
void load_checkpoint_weights(const std::string& dir, Engine& engine);

// `zerotrain bench gemm`; writes JSON to json_path when not empty.
int run_bench_gemm(const std::string& json_path);
}  // namespace zt::cli
