#include "planner/estimate.h"

#include <algorithm>

#include "util/error.h"

namespace zt {

Estimate estimate_run(const EstimateSpec& spec) {
    ZT_CHECK(spec.micro_batch >= 1, "train_micro_batch_size_per_gpu: expected >= 1, got ",
             spec.micro_batch);
    ZT_ASSERT(spec.model, "estimate_run: no model family");
    const ModelFamily& model = *spec.model;
    Estimate est;
    est.spec = spec;
    StateSpec& st = est.spec.state;
    if (st.param_count == 0) st.param_count = model.param_count();
    est.state = estimate_state(st);
    est.formula = zero_formula(st);

    const int64_t B = spec.micro_batch;
    est.policies = spec.tp > 1 ? model.activation_policies_split(B, st.compute_dtype, spec.tp,
                                                                 spec.sequence_parallel)
                               : model.activation_policies(B, st.compute_dtype);
    for (const PolicyActivations& p : est.policies)
        if (p.policy == model.checkpoint_policy()) est.activations = p;
    est.workspace_transient =
        model.transient_workspace_bytes(B, st.grad_dtype, spec.threads, st.alignment);

    est.device = est.state.device;
    est.host = est.state.host;
    est.nvme = est.state.nvme;
    est.device[static_cast<int>(MemCategory::kActivations)] += est.activations.peak;
    est.device[static_cast<int>(MemCategory::kWorkspace)] += est.workspace_transient;
    est.device[static_cast<int>(MemCategory::kEmbedding)] +=
        model.sparse_bytes_per_rank(static_cast<int>(st.ranks));
    for (int c = 0; c < kMemCategoryCount; ++c) {
        est.device_total += est.device[c];
        est.host_total += est.host[c];
        est.nvme_total += est.nvme[c];
    }
    return est;
}

StateSpec::Buckets buckets_of(const ModelFamily& model, int tp,
                              const std::vector<PipeStage>& stages, int64_t dp,
                              int64_t bucket_numel, int64_t persistence) {
    StateSpec::Buckets most;
    for (const PipeStage& s : stages.empty() ? std::vector<PipeStage>{PipeStage{}} : stages) {
        const std::vector<int64_t> numels = model.param_numels(tp, s);
        const StateSpec::Buckets b =
            reduce_bucket_peak(numels, model.params_graded_first(tp, s), dp, bucket_numel);
        int64_t small = 0, gathered = 0;
        for (int64_t n : numels) {
            small += n < persistence ? n : 0;
            gathered += n < persistence ? 0 : 1;
        }
        most.small_params = std::max(most.small_params, small);
        most.gathered_params = std::max(most.gathered_params, gathered);
        if (b.lent + b.received > most.lent + most.received) {
            most.lent = b.lent;
            most.received = b.received;
        }
        most.largest = std::max(most.largest, b.largest);
        most.largest_param = std::max(most.largest_param, b.largest_param);
    }
    return most;
}

}  // namespace zt
