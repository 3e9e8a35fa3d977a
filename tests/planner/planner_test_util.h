// Shared pieces of the planner tests: a tiny GPT base and a synthetic profile with round rates,
// so expected times come from the formulas of Note [Step time model], not from a measurement.
#pragma once

#include <memory>

#include "models/gpt/gpt_family.h"
#include "planner/cost_model.h"

namespace zt::testing {

inline PlanBase tiny_gpt_base(int64_t global_batch = 8, int64_t layers = 4) {
    PlanBase b;
    GptOptions o{64, 16, 32, layers, 4};
    b.spec.model = std::make_shared<GptFamily>(o, GptDataOptions{});
    b.spec.optimizer = "AdamW";
    b.spec.state.optimizer_states = 2;
    b.global_batch = global_batch;
    b.cores = 4;
    b.threads = 1;
    return b;
}

inline MachineProfile round_profile() {
    MachineProfile p;
    p.identity = "test";
    ThreadRates r;
    r.threads = 1;
    r.gemm_flops[0][0] = 1e9;
    r.gemm_flops[0][1] = 2e9;
    r.gemm_flops[1][0] = 2e9;
    r.gemm_flops[1][1] = 4e9;
    r.attention_flops = 5e8;
    r.elementwise_bytes_per_s = 1e10;
    p.rates.push_back(r);
    ThreadRates r4 = r;
    r4.threads = 4;
    for (auto& d : r4.gemm_flops)
        for (double& x : d) x *= 4;
    r4.attention_flops *= 4;
    r4.elementwise_bytes_per_s = 2e10;
    p.rates.push_back(r4);
    CommProfile c;
    c.backend = "local";
    c.ranks = 2;
    c.all_reduce = {1e-5, 1e9, {}};
    c.reduce_scatter = {1e-5, 1e9, {}};
    c.all_gather = {1e-5, 1e9, {}};
    c.send_recv = {2e-6, 2e9, {}};
    p.comm.push_back(c);
    p.disk_read_bytes_per_s = 1e9;
    p.disk_write_bytes_per_s = 5e8;
    return p;
}

}  // namespace zt::testing
