#include "parallel/zero_stage.h"

#include <type_traits>

#include "parallel/zero_grad_reduce.h"
#include "parallel/zero_module_gather.h"

// Note [ZeRO data flow]
// Every rank scales its micro-losses by 1/(G N) (the engine), so the sum over ranks of the
// accumulated gradients is the gradient of the global mean loss. Reductions add in rank order
// (comm/communicator.h), and the gradient norm is a sum of per-partition sums in rank order, so
// stages that reduce at the same moments give the same bits.
// - Stage 0: whole gradients; at the accumulation boundary each bucket is all-reduced in place
//   (during the last micro-step's backward with overlap_comm, else after it); every rank updates
//   the whole arena.
// - Stage 1: whole gradients, reduced at the boundary as in stage 0 but reduce-scattered: each
//   rank receives the sum of its owned slice only, updates its owned range of the (partitioned)
//   master and optimizer state, and the compute weights are all-gathered in buckets of
//   allgather_bucket_size.
// - Stage 2: as stage 1, but gradients are partitioned too: backward writes into lent bucket
//   buffers (VarNode::bind_grad), each bucket is reduce-scattered at every micro-step as soon as
//   backward has finished it (with overlap_comm while backward goes on, else waiting for it) and
//   its owned slice is added to the owned gradient range; the bucket is then released.
// - Stage 3: as stage 2, and the compute weights are partitioned: a module's parameters are
//   all-gathered before its forward and its backward and released after them, except modules
//   under stage3_param_persistence_threshold elements, which stay gathered. The gather order of
//   the first training micro-step is recorded and later gathers prefetch the next modules in it,
//   up to stage3_prefetch_bucket_size elements ahead and stage3_max_live_parameters alive.
// Collectives are issued from hooks that run in the same order on every rank, so every rank
// issues the same collectives in the same order. The reduction's hooks are installed before the
// gathering's, so on a module's post-backward its gradients are reduced before its parameters
// are released (members below are declared in that order).

namespace zt {

namespace {

// The parameter gathering of a stage, built from what its type needs.
template <typename Gather>
Gather make_gather(ZeroContext& ctx, Module& model) {
    if constexpr (std::is_constructible_v<Gather, ZeroContext&, Module&>)
        return Gather(ctx, model);
    else if constexpr (std::is_constructible_v<Gather, ZeroContext&>)
        return Gather(ctx);
    else
        return Gather();
}

// Stage kStage as the composition of its three parts (the table in zero_stage.h).
template <int kStage, typename Reduce, typename Update, typename Gather>
class Stage final : public ZeroStage {
  public:
    Stage(ZeroContext& ctx, Module& model)
        : reduce_(ctx),
          reduction_(ctx, model, reduce_),
          update_(ctx),
          gather_(make_gather<Gather>(ctx, model)) {}
    int number() const override { return kStage; }
    GradBuckets& reduction() override { return reduction_; }
    PartitionedUpdate& update() override { return update_; }
    ParamGather& gather() override { return gather_; }

  private:
    Reduce reduce_;
    GradBuckets reduction_;
    Update update_;
    Gather gather_;
};

using ZeroStage0 = Stage<0, AllReduceGrads, WholeUpdate, LocalWeights>;
using ZeroStage1 = Stage<1, ReduceScatterGrads, OwnedUpdate, AllGatherWeights>;
using ZeroStage2 = Stage<2, PartitionedGrads, OwnedUpdate, AllGatherWeights>;
using ZeroStage3 = Stage<3, PartitionedGrads, OwnedUpdate, ModuleGather>;

}  // namespace

std::unique_ptr<ZeroStage> make_zero_stage(ZeroContext& ctx, Module& model) {
    switch (ctx.options.stage) {
        case 0:
            return std::make_unique<ZeroStage0>(ctx, model);
        case 1:
            return std::make_unique<ZeroStage1>(ctx, model);
        case 2:
            return std::make_unique<ZeroStage2>(ctx, model);
        case 3:
            return std::make_unique<ZeroStage3>(ctx, model);
    }
    ZT_FAIL("zero_optimization.stage: expected 0, 1, 2 or 3, got ", ctx.options.stage);
}

}  // namespace zt
