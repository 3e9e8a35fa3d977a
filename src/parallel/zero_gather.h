// How a ZeRO stage makes whole the compute weights each rank uses: the parameter gathering.
//   LocalWeights      stage 0: every rank updated the whole arena; nothing to gather
//   AllGatherWeights  stages 1-2: after each update the owned ranges of the (whole) compute copy
//                     are all-gathered in place, in buckets of allgather_bucket_size
//   ModuleGather      stage 3 (zero_module_gather.h): gathered around each module's use
#pragma once

#include <cstdint>

#include "comm/compressed.h"
#include "parallel/zero_context.h"

namespace zt {

class ParamGather {
  public:
    virtual ~ParamGather() = default;
    // After the optimizer updated the owned master weights and the arena copied them into the
    // owned compute copy: refreshes the compute weights held whole. A collective.
    virtual void after_update() = 0;
    // After a training micro-step's backward, and after a forward without backward.
    virtual void end_backward() {}
    virtual void end_forward_only() {}
    // Elements of gathered parameters alive now.
    virtual int64_t live_gathered() const { return 0; }
    // What the gathers sent through a codec so far (zero_quantized_weights), this rank's.
    virtual CompressionStats compression_stats() const { return {}; }
};

class LocalWeights final : public ParamGather {
  public:
    void after_update() override {}
};

class AllGatherWeights final : public ParamGather {
  public:
    explicit AllGatherWeights(ZeroContext& ctx) : ctx_(ctx) {}
    void after_update() override;

  private:
    ZeroContext& ctx_;
};

}  // namespace zt
