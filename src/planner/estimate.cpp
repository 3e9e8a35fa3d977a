#include "planner/estimate.h"

#include <algorithm>

#include "models/gpt/gpt_memory.h"
#include "tensor/kernels/attention.h"
#include "util/error.h"

namespace zt {

int64_t gpt_param_count(const GptOptions& m) {
    const int64_t C = m.d_model;
    return m.vocab_size * C + m.seq_len * C + m.n_layers * (12 * C * C + 13 * C) + 2 * C;
}

int64_t gpt_transient_workspace_bytes(const GptOptions& m, int64_t B, DType grad_dtype, int threads,
                                      int64_t alignment) {
    const int64_t T = m.seq_len;
    auto r = [&](int64_t bytes) { return round_up(bytes, alignment); };
    const kernels::AttentionShape shape{B, T, m.d_model, m.n_heads};
    int64_t bytes = r(kernels::attention_workspace_bytes(shape, std::max(threads, 1)));
    bytes = std::max(bytes, r(B * T * 4));  // cross-entropy backward's dloss: (N) f32
    if (grad_dtype != DType::kF32)          // with_f32_grad's scratch of the largest table
        bytes = std::max(bytes, r(std::max(m.vocab_size, m.seq_len) * m.d_model * 4));
    return bytes;
}

Estimate estimate_gpt(const EstimateSpec& spec) {
    ZT_CHECK(spec.micro_batch >= 1, "train_micro_batch_size_per_gpu: expected >= 1, got ",
             spec.micro_batch);
    validate_checkpointing(spec.model);
    Estimate est;
    est.spec = spec;
    StateSpec& st = est.spec.state;
    if (st.param_count == 0) st.param_count = gpt_param_count(spec.model);
    est.state = estimate_state(st);
    est.formula = zero_formula(st);

    const int64_t B = spec.micro_batch, T = spec.model.seq_len;
    for (const char* policy : {"none", "every", "every_k", "selective"}) {
        GptOptions m = spec.model;
        m.checkpoint_policy = policy;
        PolicyActivations p{policy, gpt_activation_bytes(m, B, T, st.compute_dtype, false),
                            gpt_activation_bytes(m, B, T, st.compute_dtype, true)};
        est.policies.push_back(p);
        if (p.policy == spec.model.checkpoint_policy) est.activations = p;
    }
    est.workspace_transient =
        gpt_transient_workspace_bytes(spec.model, B, st.grad_dtype, spec.threads, st.alignment);

    est.device = est.state.device;
    est.host = est.state.host;
    est.device[static_cast<int>(MemCategory::kActivations)] += est.activations.peak;
    est.device[static_cast<int>(MemCategory::kWorkspace)] += est.workspace_transient;
    for (int c = 0; c < kMemCategoryCount; ++c) {
        est.device_total += est.device[c];
        est.host_total += est.host[c];
    }
    return est;
}

}  // namespace zt
