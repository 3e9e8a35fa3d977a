// Subcommands of `zerotrain`: each registers its options on the CLI11 app and runs when chosen.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

namespace zt {
struct TrainOptions;
struct TrainConfig;
struct NamedTensorF32;
class Engine;
}  // namespace zt

namespace zt::cli {

struct ConfigArgs {
    std::string path;
    std::vector<std::string> sets;  // --set a.b=v
};

// `zerotrain estimate` options beyond the config's (cli/estimate.cpp).
struct EstimateArgs {
    int64_t ranks = 1;              // data-parallel ranks to estimate for
    int64_t tensor = 0;             // tensor-parallel degree; 0: the config's
    int zero_stage = -1;            // -1: zero_optimization.stage of the config
    std::string offload_optimizer;  // "none" or "cpu"; empty: the config's
    bool json = false;
};

// `zerotrain launch` options (cli/launch.cpp, docs/launch.md).
struct LaunchArgs {
    int ranks = 0;  // -n: ranks to start
    int max_restarts = 3;
    int min_ranks = 0;              // > 0: elastic, may restart on as few as this many ranks
    std::string launcher = "auto";  // "mpirun", "srun", or "auto" (srun inside a Slurm allocation)
    std::string launcher_args;      // extra arguments for mpirun or srun, split at spaces
    std::vector<std::string> job;   // after --: train CONFIG ...
};

// `zerotrain report` options (cli/report.cpp, docs/report.md).
struct ReportArgs {
    std::string run_dir;          // a run directory (metrics.jsonl, config.json, restarts.jsonl)
    std::string memory_timeline;  // or a memory timeline file
    std::string out;              // default RUN_DIR/report.html, or FILE.html for a timeline
};

class Commands {
  public:
    void add_to(CLI::App& app);
    int run();  // runs the chosen subcommand; returns the exit code

  private:
    void add_train(CLI::App& app);
    void add_estimate(CLI::App& app);
    void add_export(CLI::App& app);
    void write_compact(const TrainConfig& cfg, std::span<const NamedTensorF32> named,
                       const std::string& dtype) const;
    void add_checkpoint(CLI::App& app);
    void add_data(CLI::App& app);
    void add_bench(CLI::App& app);
    void add_report(CLI::App& app);  // cli/report.cpp
    void add_launch(CLI::App& app);
    // Runs `train` on the ranks the config and launcher give (Note [Starting ranks]).
    void train_on_ranks(const nlohmann::json& j, const TrainOptions& opts);

    std::function<int()> chosen_;
    std::vector<std::pair<CLI::App*, std::function<int()>>> runners_;

    ConfigArgs config_;
    EstimateArgs estimate_;
    ReportArgs report_;
    LaunchArgs launch_;
    std::string run_dir_;
    int threads_ = 0;
    int ranks_ = 0;
    std::string resume_;
    bool overwrite_ = false;
    CLI::App* sub_train_ = nullptr;
    std::string memory_budget_;
    std::string memory_timeline_;
    bool quiet_ = false;
    bool auto_plan_ = false;  // train --auto (cli/plan.cpp)
    std::string rank_speed_;  // train --auto --rank-speed
    std::string rank_memory_;  // train --auto --rank-memory
    std::string out_path_;
    std::string from_run_;
    std::string in_path_;
    std::string token_dtype_ = "uint16";
    std::string weight_dtype_ = "f32";
    bool compact_ = false;  // export --compact
    std::string quantize_;  // export --quantize: "" (off), "int8", "fp8_e4m3", "fp8_e5m2"
    std::string bench_out_;
    bool bench_remeasure_ = false;  // `bench gemm --remeasure`
    double bench_seconds_ = 0.2;    // `bench peak`: seconds per kernel
};

}  // namespace zt::cli

namespace zt::cli {
// `zerotrain checkpoint inspect DIR` (cli/checkpoint_cmd.cpp).
int inspect_checkpoint(const std::string& dir, bool json);
// The master weights of a checkpoint (DIR as inspect_checkpoint takes it) into the engine, from
// whatever layout wrote it.
void load_checkpoint_weights(const std::string& dir, Engine& engine);

// `zerotrain launch`: runs the job under mpirun or srun and restarts it from its newest
// checkpoint when a rank dies; returns the job's final exit code.
int run_launch(const LaunchArgs& args);

// `zerotrain bench gemm`; writes JSON to json_path when not empty; remeasure: the engine's choice
// is measured again (its cache file replaced).
int run_bench_gemm(const std::string& json_path, bool remeasure);
// `zerotrain bench peak` (cli/bench_peak.cpp): the hardware peak at 1..max_threads threads
// (0: num_threads()), about `seconds` per kernel; writes JSON to json_path when not empty.
int run_bench_peak(int max_threads, double seconds, const std::string& json_path);
// `zerotrain plan` (cli/plan.cpp) and `zerotrain bench calibrate` (cli/bench_calibrate.cpp).
void add_plan(CLI::App& app, std::vector<std::pair<CLI::App*, std::function<int()>>>& runners);
// `zerotrain train --auto`: the config rewritten to the fastest layout that fits (cli/plan.cpp),
// said on stderr and recorded as RUN_DIR/plan.json.
// rank_speed, rank_memory: --rank-speed and --rank-memory as `zerotrain plan` takes them ("":
// equal ranks).
struct AutoPlanArgs {
    std::string budget;  // --memory-budget ("": the config's memory.budget_per_rank, else none)
    std::string rank_speed;
    std::string rank_memory;
};
nlohmann::json auto_plan(const nlohmann::json& j, const AutoPlanArgs& a,
                         const std::string& run_dir);
void add_bench_calibrate(CLI::App* bench,
                         std::vector<std::pair<CLI::App*, std::function<int()>>>& runners);
// `zerotrain data synth-ctr` and `data prepare-ctr` (cli/data_ctr.cpp) under `data`.
void add_data_ctr(CLI::App* data, std::vector<std::pair<CLI::App*, std::function<int()>>>& runners);
}  // namespace zt::cli
