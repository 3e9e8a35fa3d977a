// How a plan is named and written (planner/cost_model.h): a layout's label, its JSON, the step
// time's parts and the largest memory category, for `zerotrain plan`, `train --auto` and the
// run's plan check.
#include <string>

#include "planner/cost_model.h"
#include "util/error.h"

namespace zt {

std::string strategy_label(const Strategy& s) {
    std::string l =
        str_cat("dp ", s.dp, " x tp ", s.tp, " x pp ", s.pp, ", ZeRO-", s.zero_stage, ", micro ",
                s.micro_batch, " x ", s.grad_accum, ", checkpoint ", s.checkpoint);
    if (s.checkpoint == "blocks") l += str_cat(" (", block_recomputes_label(s.blocks), ")");
    if (s.pp > 1) {
        l += str_cat(", ", pipe_schedule_name(s.schedule));
        if (s.virtual_stages > 1) l += str_cat(" v", s.virtual_stages);
    }
    if (s.offload != "none") l += ", offload " + s.offload;
    if (s.sequence_parallel) l += ", sp";
    if (!s.partition.empty()) {
        l += ", stages ";
        for (size_t k = 0; k < s.partition.size(); ++k) l += str_cat(k ? "+" : "", s.partition[k]);
    }
    if (!s.batch_shares.empty()) {
        l += ", shares ";
        for (size_t k = 0; k < s.batch_shares.size(); ++k)
            l += str_cat(k ? "+" : "", s.batch_shares[k]);
    }
    if (!s.table_weights.empty()) {
        l += ", tables by ";
        for (size_t k = 0; k < s.table_weights.size(); ++k)
            l += str_cat(k ? "+" : "", s.table_weights[k]);
    }
    return l;
}

nlohmann::json strategy_json(const Strategy& s) {
    nlohmann::json j = {{"dp", s.dp},
                        {"tp", s.tp},
                        {"pp", s.pp},
                        {"zero_stage", s.zero_stage},
                        {"micro_batch", s.micro_batch},
                        {"grad_accum", s.grad_accum},
                        {"checkpoint", s.checkpoint},
                        {"offload", s.offload}};
    if (s.tp > 1) j["sequence_parallel"] = s.sequence_parallel;
    if (!s.partition.empty()) j["partition"] = s.partition;
    if (s.checkpoint == "blocks") j["checkpoint_blocks"] = block_recomputes_json(s.blocks);
    if (!s.batch_shares.empty()) j["batch_shares"] = s.batch_shares;
    if (!s.table_weights.empty()) j["table_weights"] = s.table_weights;
    if (s.pp > 1) {
        j["schedule"] = pipe_schedule_name(s.schedule);
        j["virtual_stages"] = s.virtual_stages;
    }
    return j;
}

std::pair<std::string, int64_t> largest_category(const CategoryBytes& bytes) {
    int best = 0;
    for (int k = 1; k < kMemCategoryCount; ++k)
        if (bytes[k] > bytes[best]) best = k;
    const MemCategory cat = static_cast<MemCategory>(best);
    return {mem_category_name(cat), bytes[best]};
}

std::pair<std::string, int64_t> largest_category(const Estimate& e) {
    return largest_category(e.device);
}

nlohmann::json step_time_json(const StepTime& t) {
    return {{"compute_s", t.compute},
            {"recompute_s", t.recompute},
            {"optimizer_s", t.optimizer},
            {"dp_comm_s", t.dp_comm},
            {"dp_comm_exposed_s", t.dp_comm - t.dp_overlapped},
            {"dp_comm_overlapped_s", t.dp_overlapped},
            {"tp_comm_s", t.tp_comm},
            {"tp_comm_exposed_s", t.tp_comm},
            {"tp_comm_overlapped_s", 0.0},
            {"pp_comm_s", t.pp_comm},
            {"pp_comm_exposed_s", t.pp_comm - t.pp_overlapped},
            {"pp_comm_overlapped_s", t.pp_overlapped},
            {"emb_comm_s", t.emb_comm},
            {"comm_exposed_s", t.comm_exposed()},
            {"comm_overlapped_s", t.comm_overlapped()},
            {"bubble_s", t.bubble},
            {"offload_io_s", t.offload_io},
            {"total_s", t.total()}};
}

nlohmann::json plan_cost_json(const PlanCost& c) {
    nlohmann::json mem = nlohmann::json::object();
    for (int k = 0; k < kMemCategoryCount; ++k)
        mem[mem_category_name(static_cast<MemCategory>(k))] = c.memory.device[k];
    mem["total"] = c.memory.device_total;
    nlohmann::json j = {{"strategy", strategy_json(c.strategy)},
                        {"label", strategy_label(c.strategy)},
                        {"device_bytes", mem},
                        {"host_bytes", c.memory.host_total},
                        {"nvme_bytes", c.memory.nvme_total}};
    if (!c.stage_bytes.empty()) j["stage_bytes"] = c.stage_bytes;
    if (c.timed) j["step_time"] = step_time_json(c.time);
    return j;
}

}  // namespace zt
