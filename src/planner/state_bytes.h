// Model-state bytes per rank (shared/DESIGN.md, Memory model): weights, gradients, master weights
// and optimizer state for a ZeRO stage over N data-parallel ranks, buffer by buffer, each rounded
// up as the tracked pool rounds it, with the flat arena padded to a multiple of N. Pure arithmetic:
// nothing is allocated. Activations are gpt_activations.h's; this file leaves them out.
// Letters: Psi parameter count, P the arena length (Psi padded to a multiple of N), S = P / N the
// shard one rank owns, g bytes per gradient element.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "tensor/dtype.h"
#include "tensor/memory.h"

namespace zt {

// DeepSpeed's defaults (elements): zero_optimization.reduce_bucket_size,
// stage3_prefetch_bucket_size and stage3_param_persistence_threshold.
constexpr int64_t kDefaultReduceBucketNumel = 500'000'000;
constexpr int64_t kDefaultPrefetchBucketNumel = 50'000'000;
constexpr int64_t kDefaultPersistenceThreshold = 100'000;

struct StateSpec {
    int64_t param_count = 0;            // Psi
    int64_t ranks = 1;                  // N, data-parallel
    int zero_stage = 0;                 // 0 (DDP) .. 3
    DType compute_dtype = DType::kF32;  // f32; bf16 or f16: mixed precision with f32 master
    DType grad_dtype = DType::kF32;     // accumulation dtype (grad_accum_dtype)
    int optimizer_states = 2;           // f32 buffers per element: Adam 2, SGD with momentum 1
    // Their names in the report (the optimizer's state_names()); empty: named by the count as
    // Adam's (2) or SGD's (1) are.
    std::vector<std::string> optimizer_state_names;
    // zero_optimization.offload_optimizer: master weights and optimizer state on the "cpu" tier
    // (host memory) or, with offload_nvme, the "nvme" tier (swap files); staging buffers of
    // offload_buffers sub-groups of offload_sub_group elements in host memory.
    bool offload_optimizer = false;
    bool offload_nvme = false;
    double offload_ratio = 1.0;  // the fraction of the update range on the tier (partial offload)
    int64_t offload_sub_group = 1000000000;
    int offload_buffers = 4;
    // zero_optimization.offload_param (stage 3): the compute weights' shard on the host or, with
    // offload_param_nvme, in swap files.
    bool offload_param = false;
    bool offload_param_nvme = false;
    // zero_optimization.zero_hpz_partition_size (ZeRO++ hpZ, stage 3): each rank also keeps its
    // 1/L slice of the partitioned weights gathered in the forward, in the compute dtype.
    int64_t hpz_partition_size = 1;
    // optimizer.type OneBitAdam over N > 1 ranks (parallel/momentum_exchange.h): f32 worker
    // residual of the whole arena, server residual and averaged segment of this rank's 1/N, and
    // while exchanging, the sign codec's send and receive bytes.
    bool onebit_adam = false;
    int64_t reduce_bucket_numel = kDefaultReduceBucketNumel;
    // The engine's gradient buckets as planned from the parameters (reduce_bucket_peak); zeros:
    // not known, one bucket of reduce_bucket_numel (or the arena, if smaller) taken instead.
    struct Buckets {
        int64_t largest = 0;        // elements of the largest bucket
        int64_t lent = 0;           // stages 2-3: elements of the buckets lent at once, at most
        int64_t received = 0;       // and of the received share of a bucket beside them
        int64_t largest_param = 0;  // stage 3 gathers a module's weights whole, at least this
        // Elements of the parameters under persistence_threshold: stage 3 keeps the modules
        // whose weights are fewer gathered all along, these at most (Note [Gathered weights live
        // at once]).
        int64_t small_params = 0;
        // Parameters at or over persistence_threshold: stage 3's gathers per pass, about
        // (Note [Rendezvous on shared cores], calibrate.cpp).
        int64_t gathered_params = 0;
    } buckets;
    int64_t prefetch_bucket_numel = kDefaultPrefetchBucketNumel;
    // zero_optimization.stage3_param_persistence_threshold: a module with fewer weights stays
    // gathered (parallel/zero_module_gather.h).
    int64_t persistence_threshold = kDefaultPersistenceThreshold;
    int64_t alignment = MemoryPool::kAlignment;  // bytes every allocation is rounded up to
};

using CategoryBytes = std::array<int64_t, kMemCategoryCount>;

// One buffer a rank holds.
struct BufferEstimate {
    std::string name;  // "master weights", "exp_avg", ...
    MemCategory category;
    bool host = false;  // in host memory (offload), not the device's
    bool nvme = false;  // in an NVMe swap file (offload "nvme")
    int64_t numel = 0;
    int64_t elem_bytes = 0;
    int64_t bytes = 0;  // numel x elem_bytes, rounded up to the alignment
};

struct StateEstimate {
    int64_t padded_numel = 0;  // P
    int64_t shard_numel = 0;   // S = P / N
    std::vector<BufferEstimate> buffers;
    // Device comm bytes that live all step beside the activations (1-bit Adam's residuals);
    // the rest of kComm is transient (planner/cost_model.cpp, Note [Peak of stages 0 and 1]).
    int64_t resident_comm = 0;
    // Device comm bytes allocated only as a bucket's reduction lands, at ZeRO stages 2 and 3:
    // the last bucket's received share lives after the backward has freed its activations.
    int64_t after_backward_comm = 0;
    CategoryBytes device{};  // summed per category
    CategoryBytes host{};
    CategoryBytes nvme{};
};

StateEstimate estimate_state(const StateSpec& spec);

// The gradient buckets the engine plans (parallel/zero_layout.h, plan_buckets) over an arena of
// parameters of these element counts (arena order), padded to `ranks`, with reduce_bucket_size
// `bucket_numel` (a bucket closes once it reaches the size, so one can hold a parameter larger
// than it), and what stages 2-3 hold of them at once (Note [Reduce buckets in the estimate]):
// `early` lists the parameters whose gradient arrives first in the backward (a head tied to the
// embedding), whose buckets stay lent all backward. All zero when numels is empty.
StateSpec::Buckets reduce_bucket_peak(const std::vector<int64_t>& numels,
                                      const std::vector<int>& early, int64_t ranks,
                                      int64_t bucket_numel);

// A config's optimizer state, for StateSpec: its f32 buffers per element ("AdamW", "Adam": 2 ;
// "SGD": 1 with momentum, else 0; "Adagrad": sum, "Lion": exp_avg, 1 each).
std::vector<std::string> optimizer_state_names_of(const std::string& type, bool momentum);

// DESIGN.md's expression for the per-rank model-state bytes of a spec: replicated x Psi +
// sharded x Psi / N, with `text` as DESIGN.md writes it ("(2+g)Psi + 12Psi/N").
struct ZeroFormula {
    int64_t replicated = 0;  // bytes per parameter every rank holds
    int64_t sharded = 0;     // bytes per parameter split over the N ranks
    std::string text;
    // The formula's value for psi parameters: replicated x psi + sharded x psi / n (real division).
    double bytes(double psi, double n) const { return replicated * psi + sharded * psi / n; }
};

ZeroFormula zero_formula(const StateSpec& spec);

// Rounds bytes up to a multiple of alignment (>= 1).
inline int64_t round_up(int64_t bytes, int64_t alignment) {
    return (bytes + alignment - 1) / alignment * alignment;
}

}  // namespace zt
