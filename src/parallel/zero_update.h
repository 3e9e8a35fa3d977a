// Which part of the arena a rank's optimizer updates, and the sums over it that must come out
// the same at every stage (the gradient norm): the partitioned update of a ZeRO stage.
//   WholeUpdate  stage 0: every rank updates the whole arena
//   OwnedUpdate  stages 1-3: each rank updates its owned range
// Both sum a per-partition part over the partitions of the padded arena in rank order, so the
// norm has the same bits at every stage. Where the master weights and gradients of the range
// live (a view of a whole buffer, or an owned one) is the arena's layout, not this type's.
#pragma once

#include <functional>

#include "parallel/zero_context.h"

namespace zt {

class PartitionedUpdate {
  public:
    // part(g, n): a partition's share of a sum, from its n f32 gradients at g.
    using Part = std::function<double(float*, int64_t)>;

    virtual ~PartitionedUpdate() = default;
    // The arena range this rank's optimizer updates.
    virtual Range range() const = 0;
    // Sum over the whole arena of part() taken over each rank's partition, added in rank order.
    // g holds range()'s f32 gradients. A collective where the partitions are on other ranks.
    double partitioned_sum(float* g, const Part& part) {
        const double mine = local_sum(g, part);
        return spread_over_ranks() ? ctx_.sum_over_ranks(mine) : mine;
    }
    // partitioned_sum() without its collective: what this rank adds, to be summed over ranks in
    // rank order where spread_over_ranks() (ZeroContext::sums_over_ranks), else the sum itself.
    virtual double local_sum(float* g, const Part& part) = 0;
    virtual bool spread_over_ranks() const = 0;

  protected:
    explicit PartitionedUpdate(ZeroContext& ctx) : ctx_(ctx) {}
    ZeroContext& ctx_;
};

class WholeUpdate final : public PartitionedUpdate {
  public:
    explicit WholeUpdate(ZeroContext& ctx) : PartitionedUpdate(ctx) {}
    Range range() const override { return {0, ctx_.padded()}; }
    // Computes every rank's partition locally.
    double local_sum(float* g, const Part& part) override;
    bool spread_over_ranks() const override { return false; }
};

class OwnedUpdate final : public PartitionedUpdate {
  public:
    explicit OwnedUpdate(ZeroContext& ctx) : PartitionedUpdate(ctx) {}
    Range range() const override { return ctx_.owned; }
    // Each rank its own partition, then a sum over ranks.
    double local_sum(float* g, const Part& part) override;
    bool spread_over_ranks() const override { return ctx_.ranks > 1; }
};

}  // namespace zt
