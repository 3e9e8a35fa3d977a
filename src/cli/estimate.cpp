// `zerotrain estimate CONFIG [--ranks N] [--zero-stage S] [--offload-optimizer cpu] [--json]`:
// per-rank memory of a config for any ZeRO stage, rank count and optimizer offload, before the
// engine has them. The config is parsed for one rank (its micro-batch is the per-rank one), with
// zero_optimization.stage and offload_optimizer.device taken out first: the parser refuses them
// until the distributed and offload issues land, the estimator models them already.
#include "planner/estimate.h"

#include <cmath>
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

struct ZeroSettings {
    int stage = 0;
    std::string offload_optimizer = "none";
};

// Reads zero_optimization.stage and offload_optimizer.device from j and resets them to what
// parse_config accepts (0, "none"). Wrong types are left for parse_config to report.
ZeroSettings take_zero_settings(nlohmann::json& j) {
    ZeroSettings z;
    if (!j.is_object()) return z;
    auto it = j.find("zero_optimization");
    if (it == j.end() || !it->is_object()) return z;
    nlohmann::json& zo = *it;
    if (auto s = zo.find("stage"); s != zo.end() && s->is_number()) {
        const double v = s->get<double>();
        ZT_CHECK(v == std::trunc(v) && v >= 0 && v <= 3,
                 "zero_optimization.stage: expected 0, 1, 2 or 3, got ", s->dump());
        z.stage = static_cast<int>(v);
        *s = 0;
    }
    auto o = zo.find("offload_optimizer");
    if (o == zo.end() || !o->is_object()) return z;
    if (auto d = o->find("device"); d != o->end() && d->is_string()) {
        z.offload_optimizer = d->get<std::string>();
        ZT_CHECK(z.offload_optimizer == "none" || z.offload_optimizer == "cpu",
                 "zero_optimization.offload_optimizer.device: the estimator models \"none\" and "
                 "\"cpu\", got \"",
                 z.offload_optimizer, "\"");
        *d = "none";
    }
    return z;
}

int run_estimate(const ConfigArgs& config, const EstimateArgs& args) {
    nlohmann::json j = load_config_file(config.path);
    for (const std::string& s : config.sets) apply_override(j, s);
    ZeroSettings zero = take_zero_settings(j);
    if (args.zero_stage >= 0) zero.stage = args.zero_stage;
    if (!args.offload_optimizer.empty()) zero.offload_optimizer = args.offload_optimizer;
    ParsedConfig parsed = parse_config(j, 1);
    for (const std::string& w : parsed.warnings)
        log_warn("config: unknown key \"", w, "\" ignored");
    const Estimate est = estimate_gpt(
        estimate_spec(parsed.config, zero.stage, zero.offload_optimizer == "cpu", args.ranks));
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
