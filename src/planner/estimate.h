// The memory estimate of a training run (`zerotrain estimate`): per-rank bytes by category for
// the precision, ZeRO stage, rank count and offload of the run: model state from state_bytes.h,
// activations of one micro-batch for every checkpointing policy and the scratch kernels take
// from the model family (models/family.h). Pure: the caller turns its config into an EstimateSpec;
// estimate_report.h prints the result.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "models/family.h"
#include "planner/state_bytes.h"

namespace zt {

struct EstimateSpec {
    std::shared_ptr<const ModelFamily> model;  // its checkpoint policy is the run's
    int64_t micro_batch = 1;                   // per rank
    StateSpec state;                           // param_count 0: model->param_count()
    std::string optimizer = "AdamW";           // for the report; state.optimizer_states sizes it
    int threads = 1;                           // intra-op threads (attention scratch is per thread)
    // parallel.tensor: state.param_count is then one part's; activations are one rank's
    // (ModelFamily::activation_policies_split; a family without its own: the one-process figure).
    int tp = 1;
    bool sequence_parallel = false;  // parallel.sequence_parallel (with tp > 1)
    // parallel.pipeline: state.param_count is the most loaded stage's; estimate_run's
    // activations as above (one micro-batch of the whole model), the cost model's
    // (plan_memory_of_stage, planner/stage_memory.h) those a stage holds in flight.
    int pp = 1;
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
    CategoryBytes nvme{};  // offload "nvme": the swap files' bytes
    int64_t device_total = 0;
    int64_t host_total = 0;
    int64_t nvme_total = 0;
};

Estimate estimate_run(const EstimateSpec& spec);

// StateSpec::buckets for a model split over tp ranks, on the most loaded of its pipeline stages
// (none: the whole model), dp ranks, reduce_bucket_size `bucket_numel` and
// stage3_param_persistence_threshold `persistence`; zeros where the family cannot list its
// parameters (ModelFamily::param_numels).
StateSpec::Buckets buckets_of(const ModelFamily& model, int tp,
                              const std::vector<PipeStage>& stages, int64_t dp,
                              int64_t bucket_numel, int64_t persistence);

}  // namespace zt
