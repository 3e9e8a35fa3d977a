// `zerotrain estimate CONFIG [--ranks N] [--zero-stage S] [--offload-optimizer none|cpu|nvme]
// [--json]`: per-rank memory of a config for any ZeRO stage, rank count and optimizer offload tier,
// by tier (device, host, nvme), before anything is allocated. The config is parsed for one rank
// (its micro-batch is the per-rank one); with parallel.pipeline, for one rank of each stage, and
// the report adds each stage's bytes (planner/stage_memory.h).
#include "planner/estimate.h"

#include <cstdio>

#include "cli/commands.h"
#include "planner/estimate_report.h"
#include "planner/stage_memory.h"
#include "runtime/config.h"
#include "runtime/run_estimate.h"
#include "tensor/threads.h"
#include "util/error.h"
#include "util/log.h"

namespace zt::cli {

namespace {

int run_estimate(const ConfigArgs& config, const EstimateArgs& args) {
    nlohmann::json j = load_config_file(config.path);
    for (const std::string& s : config.sets) apply_override(j, s);
    if (args.tensor > 0) j["parallel"]["tensor"] = args.tensor;
    // One rank of each dp group: the world is one tensor-parallel group.
    const int64_t tp = j.contains("parallel") && j["parallel"].contains("tensor") &&
                               j["parallel"]["tensor"].is_number_integer()
                           ? std::max<int64_t>(1, j["parallel"]["tensor"].get<int64_t>())
                           : 1;
    // And one of each pipeline stage: each stage's, and the most loaded stage's above them.
    int64_t pp = 1;
    if (j.contains("parallel") && j["parallel"].contains("pipeline")) {
        const nlohmann::json& p = j["parallel"]["pipeline"];
        if (p.is_number_integer()) pp = std::max<int64_t>(1, p.get<int64_t>());
        if (p.is_object() && p.contains("stages") && p["stages"].is_number_integer())
            pp = std::max<int64_t>(1, p["stages"].get<int64_t>());
    }
    ParsedConfig parsed = parse_config(j, tp * pp);
    OffloadOptimizerOptions& oo = parsed.config.zero.offload_optimizer;
    if (!args.offload_optimizer.empty()) oo.device = args.offload_optimizer;
    const int stage = args.zero_stage >= 0 ? args.zero_stage : parsed.config.zero.stage;
    for (const std::string& w : parsed.warnings) log_warn("config: ", w);
    const EstimateSpec spec = estimate_spec(parsed.config, stage, oo.device != "none", args.ranks);
    // On a pipeline the cost model's figures: each stage's, and above them the most loaded
    // stage's (each category the largest over the stages), activations in flight included.
    const Estimate est = estimate_config(parsed.config, spec);
    std::vector<StageMemory> stages;
    if (parsed.config.pipe.active()) {
        const EstimateLayout l = estimate_layout(parsed.config, spec);
        stages = stage_memories(l.base, l.strategy);
    }
    if (args.json) {
        nlohmann::json j = estimate_json(est, config.path);
        if (!stages.empty()) {
            j["stages"] = stage_memory_json(stages);
            j["most_loaded_stage"] = stages[most_loaded_stage(stages)].stage;
        }
        std::printf("%s\n", j.dump(2).c_str());
    } else {
        std::printf("%s%s", estimate_text(est, config.path).c_str(),
                    stage_memory_text(stages).c_str());
    }
    return 0;
}

}  // namespace

void Commands::add_estimate(CLI::App& app) {
    CLI::App* sub = app.add_subcommand(
        "estimate", "per-rank memory by category for a config, at any ZeRO stage and rank count");
    sub->add_option("config", config_.path, "JSON config (DeepSpeed keys plus zerotrain's)")
        ->required();
    sub->add_option("--set", config_.sets, "override a config key: --set a.b=v (v parsed as JSON)");
    sub->add_option("--ranks", estimate_.ranks, "data-parallel ranks N (default 1)")
        ->check(CLI::PositiveNumber);
    sub->add_option("--tensor", estimate_.tensor,
                    "tensor-parallel degree T (default: parallel.tensor, else 1); the figures are "
                    "one rank's of a dp x T mesh")
        ->check(CLI::PositiveNumber);
    sub->add_option("--zero-stage", estimate_.zero_stage,
                    "ZeRO stage 0-3 (default: zero_optimization.stage, else 0)")
        ->check(CLI::Range(0, 3));
    sub->add_option("--offload-optimizer", estimate_.offload_optimizer,
                    "none, cpu or nvme (default: zero_optimization.offload_optimizer.device)")
        ->check(CLI::IsMember({"none", "cpu", "nvme"}));
    sub->add_flag("--json", estimate_.json, "print the estimate as JSON");
    runners_.emplace_back(sub, [this] { return run_estimate(config_, estimate_); });
}

}  // namespace zt::cli
