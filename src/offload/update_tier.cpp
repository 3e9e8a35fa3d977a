#include "offload/update_tier.h"

#include "offload/host_store.h"
#include "offload/memory_state.h"
#include "offload/nvme_store.h"
#include "offload/tiered_state.h"
#include "util/error.h"

namespace zt {

namespace {

TieredStateOptions tiered_options(const OffloadOptimizerOptions& o) {
    TieredStateOptions t;
    t.sub_group_size = o.sub_group_size;
    t.buffer_count = o.buffer_count;
    return t;
}

std::unique_ptr<Store> make_store(const OffloadOptimizerOptions& o, uint64_t bytes,
                                  const std::string& name) {
    if (o.device == "cpu") return std::make_unique<HostStore>(bytes);
    NvmeStoreOptions n;
    n.dir = o.nvme_path;
    n.name = "optimizer-" + name;
    n.bytes = bytes;
    n.queue_depth = o.aio.queue_depth;
    n.single_submit = o.aio.single_submit;
    n.chunk_bytes = static_cast<size_t>(o.aio.block_size);
    return std::make_unique<NvmeStore>(n);
}

}  // namespace

uint64_t update_tier_bytes(const OffloadOptimizerOptions& options, const Optimizer& optimizer,
                           int64_t numel) {
    if (options.device == "none") return 0;
    return TieredState::store_bytes(optimizer, numel, tiered_options(options));
}

std::unique_ptr<UpdateState> make_update_state(const OffloadOptimizerOptions& options,
                                               Optimizer& optimizer, MemoryPool& pool,
                                               float* master, int64_t numel, ComputeCopy compute,
                                               const std::string& name) {
    if (options.device == "none")
        return std::make_unique<MemoryState>(optimizer, pool, master, numel, compute);
    ZT_CHECK(options.device == "cpu" || options.device == "nvme",
             "zero_optimization.offload_optimizer.device: expected \"none\", \"cpu\" or \"nvme\", "
             "got \"",
             options.device, "\"");
    const TieredStateOptions t = tiered_options(options);
    return std::make_unique<TieredState>(
        optimizer, numel, compute,
        make_store(options, TieredState::store_bytes(optimizer, numel, t), name), t);
}

}  // namespace zt
