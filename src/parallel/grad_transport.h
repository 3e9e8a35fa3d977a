// How a gradient bucket travels (Note [Compressed collectives], comm/compressed.h): the plain
// collectives in the bucket's dtype, or a codec's bytes (compression.gradients). The stage's
// GradReduce (zero_grad_reduce.h) decides what is reduced and where the result lands; the
// transport only moves it. One transport per ZeroContext, chosen once (make_grad_transport).
// The compressed transport keeps, per bucket, the worker's error-feedback residual (the whole
// bucket) and, for all-reduces, the server's (this rank's segment of it), when the codec uses
// error feedback. With compression.gradients.start_step N the first N optimizer steps reduce
// through the plain collectives (Note [Uncompressed warm-up] in grad_transport.cpp).
#pragma once

#include <memory>
#include <span>
#include <string>

#include "comm/codec/codec.h"
#include "comm/compressed.h"
#include "comm/residual_state.h"
#include "parallel/zero_grad_buckets.h"

namespace zt {

// Its residuals (ResidualState): per bucket, the worker's then the server's error-feedback
// residual (PowerSGD: its own list), empty without error feedback.
class GradTransport : public ResidualState {
  public:
    // All-reduce of `wire` (the whole bucket r.bucket) in place: start sets r.handle (null when
    // nothing is in flight); finish, after r.handle completed, leaves the sum in `wire`.
    virtual void start_all_reduce(BucketReduction& r, const Tensor& wire) = 0;
    virtual void finish_all_reduce(BucketReduction& r, const Tensor& wire) = 0;
    // Reduce-scatter of `wire` (the whole bucket): finish leaves this rank's segment of the sum
    // in r.recv (of wire's dtype).
    virtual void start_reduce_scatter(BucketReduction& r, const Tensor& wire) = 0;
    virtual void finish_reduce_scatter(BucketReduction& r) = 0;
    // What went through codecs since the transport was made (zeros for the plain one).
    virtual CompressionStats stats() const { return {}; }
    // Before the reductions of optimizer step steps_done + 1 (every micro-step's backward): the
    // warm-up transport chooses its collectives for the step here. Same value on every rank.
    virtual void begin_step(int64_t /*steps_done*/) {}
};

std::unique_ptr<GradTransport> make_grad_transport(ZeroContext& ctx,
                                                   const GradCompressionOptions& o);

}  // namespace zt
