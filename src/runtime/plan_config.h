// The planner's view of a training config (docs/planner.md): the PlanBase the cost model needs
// (model, precision, optimizer, global batch, hosts), the Strategy a config runs, a config
// rewritten to run another Strategy (`zerotrain train --auto`, `zerotrain plan`'s output), and
// whether the runtime accepts that config (the search's check: what the engine does not run is
// refused with the config's own message).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "planner/cost_model.h"
#include "runtime/config.h"

namespace zt {

// cfg parsed for `world` ranks; threads: the intra-op threads a rank runs (0: cores / ranks on
// the host); backend "local" or "mpi"; ranks_per_host 0: every rank on this host.
PlanBase plan_base(const TrainConfig& cfg, int threads, const std::string& backend,
                   int ranks_per_host = 0);

Strategy strategy_of(const TrainConfig& cfg);

// The config j, its layout keys (parallel, batch terms, zero_optimization.stage and
// offload_optimizer.device, activation_checkpointing.policy) set to s; global_batch kept.
nlohmann::json with_strategy(const nlohmann::json& j, const Strategy& s, int64_t global_batch);

// The --set arguments that turn a config into layout s ("zero_optimization.stage=1", ...).
std::vector<std::string> config_sets(const Strategy& s, int64_t global_batch);

// "" when parse_config accepts with_strategy(j, s) for s's world, else its message.
std::string config_refuses(const nlohmann::json& j, const Strategy& s, int64_t global_batch);

// The base of the config j for a world of `ranks`: the config parsed as one rank of a dp-only
// world, so that any layout can be costed; the global batch is train_batch_size when given, else
// micro x accumulation x ranks.
struct PlanInput {
    PlanBase base;
    nlohmann::json config;  // j, for with_strategy
    bool nvme = false;      // the config names an nvme_path: offload "nvme" can be searched
};
PlanInput plan_input(const nlohmann::json& j, int ranks, int threads, const std::string& backend);

}  // namespace zt
