// Choosing the tier of the update range (offload/update_state.h) from the run's settings:
// DeepSpeed's zero_optimization.offload_optimizer and aio keys, as the engine receives them.
#pragma once

#include <memory>
#include <string>

#include "offload/param_tier.h"
#include "offload/update_state.h"

namespace zt {

// DeepSpeed's "aio" section: how the NVMe tier drives the disk.
struct AioOptions {
    int64_t block_size = 8 << 20;  // bytes per request (DeepSpeed: 1 MiB; 8 MiB is faster here)
    int queue_depth = 8;           // requests in flight
    int thread_count = 1;          // accepted; io_uring needs no submission threads
    bool single_submit = false;    // submit each request as issued, not in batches
    bool overlap_events = true;    // reads ahead and writes behind while the update runs;
                                   // false: one staging buffer, each transfer waited for
};

struct OffloadOptimizerOptions {
    std::string device = "none";  // "none", "cpu" or "nvme"
    std::string nvme_path;        // nvme: the directory of the swap files
    int buffer_count = 4;         // staging buffers the step streams sub-groups through
    bool pin_memory = false;      // accepted: host buffers are always page-locked-equivalent here
    int64_t sub_group_size = 1000000000;  // elements per sub-group
    // The fraction of the update range on the tier, in (0, 1] (ZeRO-Offload++; the rest stays
    // in memory: offload/split_state.h).
    double ratio = 1.0;
    AioOptions aio;
};

// DeepSpeed's zero_optimization.offload_param: ZeRO-3's compute weights on a tier.
struct OffloadParamOptions {
    std::string device = "none";  // "none", "cpu" or "nvme"
    std::string nvme_path;        // nvme: the directory of the swap files
};

// The parameter tier of a rank's owned range (numel elements of dtype), or null for "none".
// `name` makes the swap file's name unique per rank. aio: as the optimizer's tier drives the disk.
std::unique_ptr<ParamTier> make_param_tier(const OffloadParamOptions& options,
                                           const AioOptions& aio, int64_t numel, DType dtype,
                                           const std::string& name);

// The update state of `numel` elements for `optimizer` on the configured tier. master: the arena's
// f32 master weights of the range ("none" only); compute: where a step writes the compute copy.
// `name` makes the swap file's name unique per rank (the rank number). "none" keeps the master as
// initialized; "cpu" and "nvme" start empty: call init(). With `params` (offload_param, which
// needs an offloaded optimizer) the compute weights go to that tier. `grads_on_host`: the
// gradients the step reads are in host memory (TieredStateOptions::grads_on_host).
std::unique_ptr<UpdateState> make_update_state(const OffloadOptimizerOptions& options,
                                               Optimizer& optimizer, MemoryPool& pool,
                                               float* master, int64_t numel, ComputeCopy compute,
                                               const std::string& name, ParamTier* params = nullptr,
                                               bool grads_on_host = false);

// Bytes the tier needs for `numel` elements (0 for "none"): the swap file or host memory.
uint64_t update_tier_bytes(const OffloadOptimizerOptions& options, const Optimizer& optimizer,
                           int64_t numel);

}  // namespace zt
