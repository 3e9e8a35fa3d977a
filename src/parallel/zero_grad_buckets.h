// Gradient reduction in buckets: GradBuckets decides when each bucket of ctx.buckets is reduced
// (as backward finishes it, or after the backward; once per accumulation boundary or at every
// micro-step), a GradReduce decides how (the collective and where its result lands: one type per
// stage, zero_grad_reduce.h). GradBuckets also converts a bucket to communication_data_type and
// counts the waits as exposed communication. Note [ZeRO data flow] (zero_stage.cpp) says which
// stage reduces when.
#pragma once

#include <memory>
#include <vector>

#include "comm/compressed.h"
#include "parallel/zero_context.h"

namespace zt {

// A bucket's reduction in flight.
struct BucketReduction {
    int bucket = 0;
    CommHandle handle;  // null: nothing to wait for (one rank)
    Tensor send;        // the bucket converted to communication_data_type, when it differs
    Tensor recv;        // reduce-scatter: this rank's reduced slice
    std::unique_ptr<CompressedExchange> exchange;  // compressed transport: the bytes in flight
    Tensor wire;  // all-reduce: the bucket as it travels (reduced in place)
    Tensor f32;   // compressed transport: the bucket in f32, when its dtype differs
    Tensor aux;   // PowerSGD transport: the P factors (and uncompressed values) in flight
    // Set by the transport's start when its finish issues another collective (a compressed
    // all-reduce's all-gather, PowerSGD's Q all-reduce): such a reduction is finished only where
    // every rank finishes it in the same order (Note [Finish order]).
    bool finish_communicates = false;
};

// How one gradient bucket is reduced.
class GradReduce {
  public:
    virtual ~GradReduce() = default;
    // True when the gradients are partitioned (stages 2-3): a micro-step's gradients leave the
    // lent bucket buffers before the next micro-step, so buckets reduce at every micro-step and,
    // without overlap_comm, as soon as each is full. False: once, at the accumulation boundary.
    virtual bool partitioned() const = 0;
    // The bucket's gradients, to be sent (binds lent storage where the stage lends it).
    virtual Tensor bucket_grads(int b) = 0;
    // Starts the collective of r.bucket on `wire` (bucket_grads() in communication_data_type);
    // allocations here count as comm memory.
    virtual void issue(BucketReduction& r, const Tensor& wire) = 0;
    // After r's collective completed: puts the reduced gradients where the optimizer reads them.
    virtual void finish(BucketReduction& r) = 0;
};

class GradBuckets {
  public:
    // Installs a post-backward hook on each module of `model` with parameters, when there is
    // anything to reduce (more than one rank, or partitioned gradients).
    GradBuckets(ZeroContext& ctx, Module& model, GradReduce& reduce);
    ~GradBuckets();  // waits for reductions in flight: nothing may write freed buffers
    GradBuckets(const GradBuckets&) = delete;
    GradBuckets& operator=(const GradBuckets&) = delete;

    // Around a micro-step's backward; `boundary`: the last micro-step before an optimizer step.
    // end_backward issues the buckets not yet issued and finishes every reduction.
    void begin_backward(bool boundary);
    void end_backward();

  private:
    void mark_ready(Module& m);
    void launch(int b);
    void finish(BucketReduction& r);
    void finish_all();
    void launch_deferred();  // Note [Priority]

    ZeroContext& ctx_;
    GradReduce& reduce_;
    std::vector<int> ready_count_;   // per bucket, parameters finished this backward
    std::vector<char> param_ready_;  // per parameter, this backward
    std::vector<char> launched_;     // per bucket, this backward
    std::vector<std::unique_ptr<BucketReduction>> pending_;
    std::vector<int> deferred_;  // ready buckets waiting for the next module's gathers
    bool exchange_pending_ = false;  // this backward's sparse exchange has not run yet
    bool reducing_ = false;
};

}  // namespace zt
