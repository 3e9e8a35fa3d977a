// The planner's search (`zerotrain plan`, docs/planner.md): every whole-model layout of N ranks
// (dp x tp x pp factorizations, ZeRO stage, pipeline schedule, micro-batch split, checkpointing
// policy, optimizer offload), and for each that does not fit with every activation kept, the
// per-layer recompute list that fits (layer_search.h), each costed by cost_model.h, kept when it
// fits the per-rank memory budget and the config accepts it, ranked by predicted step time.
// Deterministic: ties go by the layout's label. Pruning: a layout group whose model state alone
// passes the budget is rejected once, without costing its activations and schedules (the result
// equals the exhaustive one, a property the tests check).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "planner/cost_model.h"

namespace zt {

struct SearchSpace {
    int ranks = 1;  // N = dp x tp x pp
    std::vector<int> zero_stages = {0, 1, 2, 3};
    std::vector<std::string> checkpoint;                 // empty: every policy the family has
    // Per-block recompute lists (planner/layer_search.h) for layouts that do not fit with every
    // activation kept, where the family has them.
    bool per_block = true;
    std::vector<std::string> offload = {"none", "cpu"};  // "nvme" when the config has a path
    std::vector<PipeSchedule> schedules = {PipeSchedule::kGpipe, PipeSchedule::kOneFOneB,
                                           PipeSchedule::kInterleaved, PipeSchedule::kZeroBubble};
    int max_tp = 0;  // 0: no cap
    int max_pp = 0;
};

// "" when the runtime accepts the layout, else why not (the config's own message).
using StrategyCheck = std::function<std::string(const Strategy&)>;

struct Rejected {
    Strategy strategy;
    std::string reason;
    int64_t device_bytes = 0;  // 0 when the layout was refused before its memory was known
};

struct SearchResult {
    std::vector<PlanCost> ranked;    // feasible, fastest first (top K when asked)
    std::vector<Rejected> rejected;  // over the budget or refused, in enumeration order
    int64_t candidates = 0;          // layouts enumerated (groups pruned count their members)
    int64_t costed = 0;              // layouts whose memory was computed
    // Nothing fits: the layout with the least device memory, and its largest category.
    bool infeasible = false;
    PlanCost smallest;
    std::string smallest_reason;  // "needs at least 9.1 GiB (... ): largest params 5.2 GiB"
};

struct SearchOptions {
    int64_t budget = 0;  // per-rank device bytes; 0: no limit
    // Host memory of one host, shared by the ranks on it: a layout whose host bytes per rank
    // (offload tiers, host gradients, staging) times its ranks on a host exceed it is rejected.
    // 0: no limit.
    int64_t host_budget = 0;
    int top = 5;         // ranked layouts kept (0: all)
    bool prune = true;   // false: cost every layout (the exhaustive reference of the tests)
    int64_t max_rejected = 100000;  // reasons kept
};

// The layouts of the space for the base's global batch (micro x accumulation x dp), in a fixed
// order. Layouts the family cannot run (tp not dividing its heads, more stages than blocks)
// are left out.
std::vector<Strategy> enumerate_layouts(const PlanBase& base, const SearchSpace& space);

SearchResult search_plans(const PlanBase& base, const SearchSpace& space,
                          const MachineProfile* profile, const SearchOptions& options,
                          const StrategyCheck& check = {});

// "ZeRO-2 needs 9.1 GiB > 8 GiB: activations 5.2 GiB".
std::string over_budget_reason(const PlanCost& c, int64_t budget);
// With base.rank_memory: each stage's peak (c.stage_bytes, filled) against its smallest rank's
// budget; "" when every stage fits, else why not ("ZeRO-1, stage 1 needs ... > ...").
std::string over_rank_memory(const PlanBase& base, PlanCost& c);

}  // namespace zt
