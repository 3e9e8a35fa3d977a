// The budget check before the first step (budget_check.h).
#include "runtime/budget_check.h"

#include <string>

#include "runtime/plan_check.h"
#include "runtime/run_estimate.h"
#include "util/error.h"
#include "util/units.h"

namespace zt {

void check_budget_before_start(const TrainConfig& cfg) {
    if (cfg.memory_budget <= 0) return;
    // Sharded embedding tables that cannot fit: the plan says which sharding would.
    cfg.model->check_sparse_fit(static_cast<int>(cfg.dp), cfg.memory_budget);
    const bool offloaded = cfg.zero.offload_optimizer.device != "none";
    const Estimate e = estimate_config(cfg, estimate_spec(cfg, cfg.zero.stage, offloaded, cfg.dp));
    const int64_t need = certain_bytes(e);
    if (need <= cfg.memory_budget) return;
    std::string lines;
    for (int c = 0; c < kMemCategoryCount; ++c)
        lines += str_cat("  ", mem_category_name(static_cast<MemCategory>(c)), ": ",
                         format_bytes(static_cast<double>(e.device[c])), "\n");
    // Offloading the optimizer (master weights and state off the device), at this stage and
    // rank count, when that alone fits.
    std::string offload;
    if (!offloaded) {
        const int64_t per_rank =
            certain_bytes(estimate_config(cfg, estimate_spec(cfg, cfg.zero.stage, true, cfg.dp)));
        if (per_rank <= cfg.memory_budget)
            offload = str_cat(
                ", or offload the optimizer: zero_optimization.offload_optimizer "
                "{\"device\": \"cpu\"} (or \"nvme\" with an nvme_path; ",
                format_bytes(static_cast<double>(per_rank)), " per rank, docs/offload.md)");
    }
    // The fewest ranks over which ZeRO stage 3 (every parameter, embedding tables included,
    // partitioned) brings the same micro-batch under the budget, if any does.
    std::string sharded;
    for (int64_t n = std::max<int64_t>(2, cfg.dp); !cfg.pipe.active() && n <= 4096; n *= 2) {
        const int64_t per_rank =
            certain_bytes(estimate_config(cfg, estimate_spec(cfg, 3, offloaded, n)));
        if (per_rank <= cfg.memory_budget) {
            sharded = str_cat("; or zero_optimization.stage 3 over ", n, " ranks (",
                              format_bytes(static_cast<double>(per_rank)), " per rank)");
            break;
        }
    }
    ZT_FAIL(
        "out of memory before the first step: the estimator puts model state plus saved "
        "activations at ",
        format_bytes(static_cast<double>(need)), " (peak up to ",
        format_bytes(static_cast<double>(e.device_total)), "), past memory.budget_per_rank ",
        format_bytes(static_cast<double>(cfg.memory_budget)), "\n", lines,
        "what would fit: raise the budget, lower train_micro_batch_size_per_gpu",
        cfg.model->activation_policies(1, DType::kF32).size() > 1
            ? ", or turn on activation_checkpointing (see `zerotrain estimate` for each policy)"
            : "",
        offload, sharded, plan_suggestion(cfg, cfg.memory_budget));
}

}  // namespace zt
