// How a gradient bucket travels (Note [Compressed collectives], comm/compressed.h): the plain
// collectives in the bucket's dtype, or a codec's bytes (compression.gradients). The stage's
// GradReduce (zero_grad_reduce.h) decides what is reduced and where the result lands; the
// transport only moves it. One transport per ZeroContext, chosen once (make_grad_transport).
// The compressed transport keeps, per bucket, the worker's error-feedback residual (the whole
// bucket) and, for all-reduces, the server's (this rank's segment of it), when the codec uses
// error feedback.
#pragma once

#include <memory>
#include <span>
#include <string>

#include "comm/codec/codec.h"
#include "comm/compressed.h"
#include "parallel/zero_grad_buckets.h"

namespace zt {

class GradTransport {
  public:
    virtual ~GradTransport() = default;
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
    // The error-feedback residuals, for checkpoints: per bucket, the worker's then the server's
    // (undefined tensors where none was made yet). Empty without error feedback.
    virtual std::vector<Tensor*> residuals() { return {}; }
    // What residuals() depends on: the codec, the ranks and this rank, the buckets. A checkpoint's
    // residuals restore only into a transport with the same layout.
    virtual std::string residual_layout() const { return {}; }
    // Residual i of residuals() <- data (allocated here when it was not made yet).
    virtual void load_residual(size_t, std::span<const float>) {}
};

std::unique_ptr<GradTransport> make_grad_transport(ZeroContext& ctx,
                                                   const GradCompressionOptions& o);

}  // namespace zt
