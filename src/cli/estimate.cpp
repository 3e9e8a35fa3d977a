// `zerotrain estimate CONFIG [--ranks N] [--zero-stage S] [--offload-optimizer cpu] [--json]`:
// per-rank memory of a config for any ZeRO stage, rank count and optimizer offload, before the
// engine has them. The config is parsed for one rank (its micro-batch is the per-rank one), with
// zero_optimization.offload_optimizer.device taken out first: the parser refuses offload until the
// engine has it, the estimator models it already.
#include "planner/estimate.h"

#include <cstdio>

#include "cli/commands.h"
#include "planner/estimate_report.h"
#include "runtime/config.h"
#include "runtime/run_estimate.h"
#include "tensor/threads.h"
#include "util/error.h"
#include "util/log.h"

namespace zt::cli {

namespace {

// Reads zero_optimization.offload_optimizer.device from j and resets it to what parse_config
// accepts ("none"). Wrong types are left for parse_config to report.
std::string take_offload_optimizer(nlohmann::json& j) {
    if (!j.is_object()) return "none";
    auto z = j.find("zero_optimization");
    if (z == j.end() || !z->is_object()) return "none";
    auto o = z->find("offload_optimizer");
    if (o == z->end() || !o->is_object()) return "none";
    auto d = o->find("device");
    if (d == o->end() || !d->is_string()) return "none";
    const std::string device = d->get<std::string>();
    ZT_CHECK(device == "none" || device == "cpu",
             "zero_optimization.offload_optimizer.device: the estimator models \"none\" and "
             "\"cpu\", got \"",
             device, "\"");
    *d = "none";
    return device;
}

int run_estimate(const ConfigArgs& config, const EstimateArgs& args) {
    nlohmann::json j = load_config_file(config.path);
    for (const std::string& s : config.sets) apply_override(j, s);
    std::string offload = take_offload_optimizer(j);
    if (!args.offload_optimizer.empty()) offload = args.offload_optimizer;
    ParsedConfig parsed = parse_config(j, 1);
    const int stage = args.zero_stage >= 0 ? args.zero_stage : parsed.config.zero.stage;
    for (const std::string& w : parsed.warnings)
        log_warn("config: ", w);
    const Estimate est = estimate_run(
        estimate_spec(parsed.config, stage, offload == "cpu", args.ranks));
    if (args.json)
        std::printf("%s\n", estimate_json(est, config.path).dump(2).c_str());
    else
        std::printf("%s", estimate_text(est, config.path).c_str());
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
    sub->add_option("--zero-stage", estimate_.zero_stage,
                    "ZeRO stage 0-3 (default: zero_optimization.stage, else 0)")
        ->check(CLI::Range(0, 3));
    sub->add_option("--offload-optimizer", estimate_.offload_optimizer,
                    "none or cpu (default: zero_optimization.offload_optimizer.device)")
        ->check(CLI::IsMember({"none", "cpu"}));
    sub->add_flag("--json", estimate_.json, "print the estimate as JSON");
    runners_.emplace_back(sub, [this] { return run_estimate(config_, estimate_); });
}

}  // namespace zt::cli
