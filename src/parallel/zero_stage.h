// A ZeRO stage as a type: the composition of a gradient reduction (GradBuckets driving the
// stage's GradReduce), a partitioned update (PartitionedUpdate) and a parameter gathering
// (ParamGather). make_zero_stage() picks the type for options.stage once, where the data-parallel
// object is built; nothing else branches on the stage number. Note [ZeRO data flow] in
// zero_stage.cpp says what each stage does when.
//   stage | GradReduce         | PartitionedUpdate | ParamGather
//   0     | AllReduceGrads     | WholeUpdate       | LocalWeights
//   1     | ReduceScatterGrads | OwnedUpdate       | AllGatherWeights
//   2     | PartitionedGrads   | OwnedUpdate       | AllGatherWeights
//   3     | PartitionedGrads   | OwnedUpdate       | ModuleGather
#pragma once

#include <memory>

#include "parallel/zero_gather.h"
#include "parallel/zero_grad_buckets.h"
#include "parallel/zero_update.h"

namespace zt {

class ZeroStage {
  public:
    virtual ~ZeroStage() = default;
    virtual int number() const = 0;  // 0-3, as zero_optimization.stage
    virtual GradBuckets& reduction() = 0;
    virtual PartitionedUpdate& update() = 0;
    virtual ParamGather& gather() = 0;
};

// The stage ctx.options.stage names, its hooks installed on `model`. ctx and model must outlive
// it. The caller refreshes the compute weights (gather().after_update()) before the first use.
std::unique_ptr<ZeroStage> make_zero_stage(ZeroContext& ctx, Module& model);

}  // namespace zt
