#include "offload/update_tier.h"

#include "offload/host_store.h"
#include "offload/memory_state.h"
#include "offload/nvme_store.h"
#include "offload/split_state.h"
#include "offload/tiered_state.h"
#include "util/error.h"

namespace zt {

namespace {

TieredStateOptions tiered_options(const OffloadOptimizerOptions& o) {
    TieredStateOptions t;
    t.sub_group_size = o.sub_group_size;
    // overlap_events false: each transfer waited for as issued, nothing read ahead or behind.
    t.buffer_count = o.aio.overlap_events ? o.buffer_count : 1;
    return t;
}

std::unique_ptr<Store> make_store(const std::string& device, const std::string& nvme_path,
                                  const AioOptions& aio, uint64_t bytes, const std::string& name) {
    if (device == "cpu") return std::make_unique<HostStore>(bytes);
    NvmeStoreOptions n;
    n.dir = nvme_path;
    n.name = name;
    n.bytes = bytes;
    n.queue_depth = aio.queue_depth;
    n.single_submit = aio.single_submit;
    n.chunk_bytes = static_cast<size_t>(aio.block_size);
    return std::make_unique<NvmeStore>(n);
}

}  // namespace

std::unique_ptr<ParamTier> make_param_tier(const OffloadParamOptions& options,
                                           const AioOptions& aio, int64_t numel, DType dtype,
                                           const std::string& name) {
    if (options.device == "none") return nullptr;
    ZT_CHECK(options.device == "cpu" || options.device == "nvme",
             "zero_optimization.offload_param.device: expected \"none\", \"cpu\" or \"nvme\", "
             "got \"",
             options.device, "\"");
    return std::make_unique<ParamTier>(
        make_store(options.device, options.nvme_path, aio, ParamTier::capacity_for(numel, dtype),
                   "params-" + name),
        numel, dtype);
}

uint64_t update_tier_bytes(const OffloadOptimizerOptions& options, const Optimizer& optimizer,
                           int64_t numel) {
    if (options.device == "none") return 0;
    return TieredState::store_bytes(optimizer, offloaded_numel(numel, options.ratio),
                                    tiered_options(options));
}

std::unique_ptr<UpdateState> make_update_state(const OffloadOptimizerOptions& options,
                                               Optimizer& optimizer, MemoryPool& pool,
                                               float* master, int64_t numel, ComputeCopy compute,
                                               const std::string& name, ParamTier* params,
                                               bool grads_on_host) {
    if (options.device == "none") {
        ZT_CHECK(params == nullptr,
                 "zero_optimization.offload_param needs offload_optimizer "
                 "too (\"cpu\" or \"nvme\"): the optimizer step writes the "
                 "offloaded weights");
        return std::make_unique<MemoryState>(optimizer, pool, master, numel, compute);
    }
    ZT_CHECK(options.device == "cpu" || options.device == "nvme",
             "zero_optimization.offload_optimizer.device: expected \"none\", \"cpu\" or \"nvme\", "
             "got \"",
             options.device, "\"");
    TieredStateOptions t = tiered_options(options);
    t.grads_on_host = grads_on_host;
    const int64_t off = offloaded_numel(numel, options.ratio);
    auto tiered = [&](int64_t n, ComputeCopy c) {
        return std::make_unique<TieredState>(
            optimizer, n, c,
            make_store(options.device, options.nvme_path, options.aio,
                       TieredState::store_bytes(optimizer, n, t), "optimizer-" + name),
            t, params);
    };
    if (off == numel) return tiered(numel, compute);
    ZT_CHECK(params == nullptr && !grads_on_host,
             "zero_optimization.offload_optimizer.ratio: partial offload keeps the gradients and "
             "weights on the device; it does not combine with offload_param");
    const int64_t in_memory = numel - off;
    ComputeCopy rest = compute;
    rest.data = static_cast<char*>(compute.data) +
                static_cast<size_t>(in_memory) * dtype_size(compute.dtype);
    return std::make_unique<SplitState>(optimizer, pool, in_memory, compute, tiered(off, rest));
}

}  // namespace zt
