// The memory estimate of a GPT training run (`zerotrain estimate`): per-rank bytes by category for
// the precision, ZeRO stage, rank count and offload of the run: model state from state_bytes.h,
// activations of one micro-batch for every checkpointing policy from models/gpt/gpt_memory.h, and the
// scratch kernels take. Pure: the caller turns its config into an EstimateSpec;
// estimate_report.h prints the result.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/gpt/gpt.h"
#include "planner/state_bytes.h"

namespace zt {

// V C + T C + L (12 C^2 + 13 C) + 2 C: embeddings, blocks, ln_f (the head is tied to wte).
int64_t gpt_param_count(const GptOptions& model);

// Scratch (category workspace) that lives only inside one kernel call of a micro-batch of B
// sequences: attention's per-thread slabs, cross-entropy's row gradients and, with non-f32
// gradients, the f32 scratch an embedding gradient is accumulated in. `threads` as the run uses.
int64_t gpt_transient_workspace_bytes(const GptOptions& model, int64_t B, DType grad_dtype,
                                      int threads, int64_t alignment);

struct EstimateSpec {
    GptOptions model;                 // checkpoint_policy and checkpoint_every_k: the run's
    int64_t micro_batch = 1;          // per rank
    StateSpec state;                  // param_count 0: gpt_param_count(model)
    std::string optimizer = "AdamW";  // for the report; state.optimizer_states sizes it
    int threads = 1;                  // intra-op threads (attention scratch is per thread)
};

// Activations of one micro-batch under one checkpointing policy (models/gpt/gpt_memory.h).
struct PolicyActivations {
    std::string policy;  // "none", "every", "every_k", "selective"
    int64_t saved = 0;   // live at the end of forward
    int64_t peak = 0;    // high-water mark over forward and backward
};

struct Estimate {
    EstimateSpec spec;  // param_count filled in
    StateEstimate state;
    ZeroFormula formula;
    std::vector<PolicyActivations> policies;  // none, every, every_k, selective
    PolicyActivations activations;            // the run's policy
    int64_t workspace_transient = 0;          // scratch inside kernel calls, on top of state's
    // Per category: model state, plus the run's activation peak and transient workspace on the
    // device. An upper bound of the device peak: the categories peak at about the same time.
    CategoryBytes device{};
    CategoryBytes host{};
    int64_t device_total = 0;
    int64_t host_total = 0;
};

Estimate estimate_gpt(const EstimateSpec& spec);

}  // namespace zt
