#include "planner/stage_memory.h"

#include <cstdio>
#include <sstream>

#include "util/error.h"
#include "util/units.h"

namespace zt {

std::vector<StageMemory> stage_memories(const PlanBase& base, const Strategy& s) {
    ZT_ASSERT(s.pp > 1, "stage_memories: no pipeline");
    ZT_ASSERT(base.spec.model, "stage_memories: no model family");
    const PipeOptions o{s.pp, static_cast<int>(s.grad_accum), s.virtual_stages, s.schedule};
    std::vector<StageMemory> out;
    for (int k = 0; k < s.pp; ++k) {
        StageMemory m;
        m.stage = k;
        m.memory = plan_memory_of_stage(base, s, k);  // validates the layout first
        m.blocks = stage_blocks(base, s, k);
        // The in-flight counts do not depend on the partition (the cache's balanced one).
        const PipeFacts& f = base.pipe_cache->facts(*base.spec.model, o);
        m.in_flight = f.peak_in_flight[static_cast<size_t>(k)];
        m.pending_w = f.peak_pending_w.empty() ? 0 : f.peak_pending_w[static_cast<size_t>(k)];
        out.push_back(std::move(m));
    }
    return out;
}

size_t most_loaded_stage(const std::vector<StageMemory>& stages) {
    size_t most = 0;
    for (size_t k = 1; k < stages.size(); ++k)
        if (stages[k].memory.device_total > stages[most].memory.device_total) most = k;
    return most;
}

std::string block_ranges_text(const std::vector<int64_t>& blocks) {
    std::string out;
    for (size_t i = 0; i < blocks.size();) {
        size_t j = i;
        while (j + 1 < blocks.size() && blocks[j + 1] == blocks[j] + 1) ++j;
        if (!out.empty()) out += ", ";
        out += j == i ? std::to_string(blocks[i]) : str_cat(blocks[i], "-", blocks[j]);
        i = j + 1;
    }
    return out.empty() ? "none" : out;
}

namespace {

int64_t device_of(const StageMemory& m, MemCategory c) {
    return m.memory.device[static_cast<int>(c)];
}

std::string in_flight_text(const StageMemory& m) {
    return m.pending_w > 0 ? str_cat(m.in_flight, " + ", m.pending_w, " W") : str_cat(m.in_flight);
}

}  // namespace

std::string stage_memory_text(const std::vector<StageMemory>& stages) {
    std::ostringstream os;
    if (stages.empty()) return "";
    const Estimate& e0 = stages.front().memory;
    os << "\nper-stage device bytes on one rank of each of the " << stages.size()
       << " pipeline stages (activations: policy "
       << e0.spec.model->checkpoint_policy_label(e0.spec.model->checkpoint_policy())
       << ", the micro-batches in flight under the schedule, plus one backward's transient):\n";
    char line[240];
    std::snprintf(line, sizeof line, "  %-5s %-14s %12s %12s %12s %12s %10s %14s\n", "stage",
                  "blocks", "params", "grads", "optimizer", "activations", "in flight",
                  "device total");
    os << line;
    const auto b = [](int64_t x) { return format_bytes(static_cast<double>(x)); };
    for (const StageMemory& m : stages) {
        std::snprintf(line, sizeof line, "  %-5d %-14s %12s %12s %12s %12s %10s %14s\n", m.stage,
                      block_ranges_text(m.blocks).c_str(),
                      b(device_of(m, MemCategory::kParams)).c_str(),
                      b(device_of(m, MemCategory::kGrads)).c_str(),
                      b(device_of(m, MemCategory::kOptimizer)).c_str(),
                      b(device_of(m, MemCategory::kActivations)).c_str(), in_flight_text(m).c_str(),
                      b(m.memory.device_total).c_str());
        os << line;
    }
    const StageMemory& most = stages[most_loaded_stage(stages)];
    os << "  most loaded: stage " << most.stage << ", " << b(most.memory.device_total)
       << " on the device\n";
    return os.str();
}

nlohmann::json stage_memory_json(const std::vector<StageMemory>& stages) {
    using nlohmann::json;
    json out = json::array();
    for (const StageMemory& m : stages) {
        json device = json::object();
        for (int c = 0; c < kMemCategoryCount; ++c)
            device[mem_category_name(static_cast<MemCategory>(c))] = m.memory.device[c];
        device["total"] = m.memory.device_total;
        out.push_back(
            {{"stage", m.stage},
             {"blocks", m.blocks},
             {"param_count", m.memory.spec.state.param_count},
             {"in_flight", m.in_flight},
             {"pending_w", m.pending_w},
             {"activations",
              {{"saved", m.memory.activations.saved}, {"peak", m.memory.activations.peak}}},
             {"device", device},
             {"host_total", m.memory.host_total},
             {"nvme_total", m.memory.nvme_total}});
    }
    return out;
}

}  // namespace zt
