#include "runtime/run_estimate.h"

#include <algorithm>

#include "compression/masked_optimizer.h"
#include "runtime/plan_config.h"
#include "tensor/threads.h"

namespace zt {

EstimateSpec estimate_spec(const TrainConfig& cfg, int zero_stage, bool offload_optimizer,
                           int64_t ranks) {
    EstimateSpec spec;
    spec.model = cfg.model;
    spec.micro_batch = cfg.micro_batch;
    for (int64_t b : cfg.batch_shares)  // the rank of the largest share holds the most
        spec.micro_batch = std::max(spec.micro_batch, b);
    spec.optimizer = cfg.optimizer.type;
    spec.threads = cfg.threads > 0 ? cfg.threads : num_threads();
    StateSpec& st = spec.state;
    spec.tp = static_cast<int>(cfg.tp);
    spec.sequence_parallel = cfg.sequence_parallel;
    if (cfg.tp > 1) st.param_count = cfg.model->param_count_split(spec.tp);  // one part's
    std::vector<PipeStage> stages;
    if (cfg.pipe.active()) {  // the most loaded stage's (its tied embedding copy included)
        const PipeOptions o = cfg.pipe.options(cfg.grad_accum);
        st.param_count = 0;
        for (int s = 0; s < o.stages; ++s) {
            stages.push_back(pipe_stage(o, cfg.pipe.partition, s));
            st.param_count =
                std::max(st.param_count, cfg.model->param_count_stage(spec.tp, stages.back()));
        }
        spec.pp = o.stages;
    }
    st.ranks = ranks;
    st.zero_stage = zero_stage;
    st.compute_dtype = parse_dtype(cfg.precision);
    st.grad_dtype = parse_dtype(cfg.grad_accum_dtype);
    st.optimizer_state_names =
        optimizer_state_names_of(cfg.optimizer.type, cfg.optimizer.momentum != 0.0);
    if (cfg.pruning.enabled())  // the mask (compression/masked_optimizer.h)
        st.optimizer_state_names.emplace_back(kPrunedStateName);
    st.optimizer_states = static_cast<int>(st.optimizer_state_names.size());
    st.offload_optimizer = offload_optimizer;
    const OffloadOptimizerOptions& oo = cfg.zero.offload_optimizer;
    st.offload_nvme = offload_optimizer && oo.device == "nvme";
    st.offload_sub_group = oo.sub_group_size;
    st.offload_ratio = oo.ratio;
    st.offload_buffers = oo.buffer_count;
    st.offload_param = offload_optimizer && cfg.zero.offload_param.device != "none";
    st.offload_param_nvme = st.offload_param && cfg.zero.offload_param.device == "nvme";
    st.hpz_partition_size = cfg.zero.hpz_partition_size;
    st.onebit_adam = cfg.optimizer.type == "OneBitAdam";
    st.reduce_bucket_numel = cfg.zero.reduce_bucket_size;
    st.persistence_threshold = cfg.zero.stage3_param_persistence_threshold;
    st.buckets = buckets_of(*cfg.model, spec.tp, stages, ranks, st.reduce_bucket_numel,
                            st.persistence_threshold);
    st.prefetch_bucket_numel = cfg.zero.stage3_prefetch_bucket_size;
    return spec;
}

int64_t certain_bytes(const Estimate& e) {
    int64_t b = e.activations.saved;
    for (MemCategory c : {MemCategory::kParams, MemCategory::kGrads, MemCategory::kOptimizer,
                          MemCategory::kEmbedding})
        b += e.device[static_cast<int>(c)];
    return b;
}

EstimateLayout estimate_layout(const TrainConfig& cfg, const EstimateSpec& spec) {
    EstimateLayout l;
    l.base.spec = spec;
    l.base.threads = spec.threads;
    Strategy& s = l.strategy;
    s = strategy_of(cfg);
    s.dp = static_cast<int>(spec.state.ranks);
    s.tp = spec.tp;
    s.zero_stage = spec.state.zero_stage;
    s.offload = !spec.state.offload_optimizer ? "none" : spec.state.offload_nvme ? "nvme" : "cpu";
    s.sequence_parallel = spec.sequence_parallel;
    if (cfg.pipe.active()) s.partition = cfg.pipe.partition;  // given or balanced, as built
    return l;
}

Estimate estimate_config(const TrainConfig& cfg, const EstimateSpec& spec) {
    if (!cfg.pipe.active()) return estimate_run(spec);
    const EstimateLayout l = estimate_layout(cfg, spec);
    return plan_memory(l.base, l.strategy);
}

}  // namespace zt
