// What every part of a ZeRO stage shares: the data-parallel group, the arena and its ZeRO layout
// (owned range, parameter ranges, gradient buckets), the zero_optimization settings, and the clock
// of communication the caller waited for. ZeroDataParallel builds it once; the stage's parts
// (zero_stage.h) borrow it. It holds no stage-specific state: what differs by stage is a type.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <unordered_map>
#include <vector>

#include "autograd/param_arena.h"
#include "comm/codec/codec.h"
#include "comm/communicator.h"
#include "comm/powersgd.h"
#include "offload/param_tier.h"
#include "parallel/zero_layout.h"

namespace zt {

// compression.gradients (docs/compression.md): the codec the gradient reductions travel in.
struct GradCompressionOptions {
    bool enabled = false;
    CodecOptions codec;
    bool error_feedback = false;
    PowerSgdOptions powersgd;  // enabled: low-rank factors instead of codec (comm/powersgd.h)
    int64_t start_step = 0;    // optimizer steps reduced plain first (grad_transport.h)
};

class GradTransport;

// DeepSpeed's zero_optimization settings that act here; sizes count elements.
struct ZeroOptions {
    int stage = 0;
    int64_t reduce_bucket_size = 500000000;
    int64_t allgather_bucket_size = 500000000;
    bool overlap_comm = false;  // reduce each bucket as soon as backward has finished it
    int64_t prefetch_bucket_size = 50000000;   // stage 3: elements gathered ahead of use
    int64_t persistence_threshold = 100000;    // stage 3: modules with fewer stay gathered
    int64_t max_live_parameters = 1000000000;  // stage 3: prefetch stops at this many gathered
    DType comm_dtype = DType::kF32;            // gradient reductions (communication_data_type)
    GradCompressionOptions grad_compression;   // gradient reductions as a codec's bytes
    // zero_quantized_weights (ZeRO++ qwZ): stage 3's gathers carry the weights as this codec's
    // bytes (blockwise int8); the master weights stay exact.
    bool quantized_weights = false;
    CodecOptions weight_codec{CodecKind::kInt8, 256, 0};
    // ZeRO++ hpZ (zero_hpz_partition_size): the group of consecutive dp ranks (a host) over which
    // stage 3 keeps a secondary partition of the weights gathered in the forward, so that the
    // backward gathers within the group; null: off.
    Communicator* hpz_group = nullptr;
    // comm.priority: a gradient bucket that backward finishes is issued after the parameter
    // gathers of the backward's next module (Note [Priority] in zero_grad_buckets.cpp).
    bool priority = false;
};

CommType comm_type_of(DType t);

// A view of elements [lo, lo + n) of a 1-D tensor.
Tensor flat_slice(const Tensor& t, int64_t lo, int64_t n);

// fn(m) for m and each module below it, parents first: the order hooks are installed in.
template <typename Fn>
void for_each_module(Module& m, Fn&& fn) {
    fn(m);
    for (Module* c : m.children()) for_each_module(*c, fn);
}

struct ZeroContext {
    // comm: the data-parallel group; null means one rank. Checks that the arena's layout is
    // zero_arena_options()'s for options.stage and this group, and plans the gradient buckets.
    // params: stage 3's owned compute weights on a tier (offload_param), else null (the arena's).
    ZeroContext(MemoryPool& pool, ParamArena& arena, Communicator* comm, ZeroOptions options,
                ParamTier* params = nullptr);
    ~ZeroContext();
    ZeroContext(const ZeroContext&) = delete;
    ZeroContext& operator=(const ZeroContext&) = delete;

    int64_t padded() const { return arena.padded_numel(); }
    Parameter& param(int i) const { return *arena.params()[static_cast<size_t>(i)]; }
    // Waits for h, adding the seconds waited to exposed_s.
    void wait_exposed(const CommHandle& h);
    // x summed over ranks in rank order (an all-gather of one double per rank).
    double sum_over_ranks(double x);
    // Each of xs summed over ranks in rank order, all in one all-gather of xs.size() doubles per
    // rank (Note [The step's scalars in one collective], runtime/engine.cpp). Every rank passes
    // as many.
    std::vector<double> sums_over_ranks(std::vector<double> xs);

    // comm.priority (Note [Priority]): the reduction launches ready buckets it deferred; set by
    // GradBuckets, called by the gathering after a backward module's gathers were issued.
    std::function<void()> launch_deferred;
    bool backward_gathers = false;  // a ModuleGather gathers during the backward
    // Sparse parameters exchange gradient rows during the backward (set by the engine through
    // ZeroDataParallel::prioritize_backward_exchange); the exchange calls
    // backward_exchange_done once it is issued (or done). Set by GradBuckets with launch_deferred.
    bool backward_exchanges = false;
    std::function<void()> backward_exchange_done;
    MemoryPool& pool;
    ParamArena& arena;
    Communicator* comm;
    ZeroOptions options;
    int ranks = 1, rank = 0;
    Range owned;                      // this rank's range of the padded arena
    std::vector<Range> param_ranges;  // per arena parameter
    std::unordered_map<const Parameter*, int> param_index;
    std::vector<Bucket> buckets;               // plan_buckets() with reduce_bucket_size
    std::vector<int> bucket_of;                // parameter -> bucket
    double exposed_s = 0;                      // seconds waited for communication
    ParamTier* param_tier = nullptr;           // offload_param: where stage 3's owned weights live
    std::unique_ptr<GradTransport> transport;  // how gradient buckets travel (grad_transport.h)
};

}  // namespace zt
