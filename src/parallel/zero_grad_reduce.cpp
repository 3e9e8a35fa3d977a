#include "parallel/zero_grad_reduce.h"

#include "parallel/grad_transport.h"
#include "tensor/kernels/elementwise.h"

namespace zt {

namespace {

const Bucket& bucket_of(const ZeroContext& ctx, const BucketReduction& r) {
    return ctx.buckets[static_cast<size_t>(r.bucket)];
}

// r.recv in the gradient dtype (a converted copy when communication_data_type differs).
Tensor received_grads(ZeroContext& ctx, const BucketReduction& r, int64_t n) {
    const DType gt = ctx.arena.options().grad_dtype;
    if (r.recv.dtype() == gt) return r.recv;
    MemScope scope(ctx.pool, MemPhase::kComm);
    Tensor out = Tensor::empty(ctx.pool, {n}, gt, MemCategory::kComm);
    out.copy_from(r.recv);
    return out;
}

}  // namespace

// ---- AllReduceGrads (stage 0) ----

Tensor AllReduceGrads::bucket_grads(int b) {
    const Range r = ctx_.buckets[static_cast<size_t>(b)].range;
    return flat_slice(ctx_.arena.grads(), r.lo, r.size());
}

void AllReduceGrads::issue(BucketReduction& r, const Tensor& wire) {
    r.wire = wire;
    ctx_.transport->start_all_reduce(r, wire);
}

void AllReduceGrads::finish(BucketReduction& r) {
    ctx_.transport->finish_all_reduce(r, r.wire);
    r.wire = Tensor();
    // The converted copy, if any, stays allocated until GradBuckets drops r.
    if (r.send.defined()) bucket_grads(r.bucket).copy_from(r.send);
}

// ---- ReduceScatterGrads (stage 1) ----

Tensor ReduceScatterGrads::bucket_grads(int b) {
    const Range r = ctx_.buckets[static_cast<size_t>(b)].range;
    return flat_slice(ctx_.arena.grads(), r.lo, r.size());
}

void ReduceScatterGrads::issue(BucketReduction& r, const Tensor& wire) {
    ctx_.transport->start_reduce_scatter(r, wire);
}

void ReduceScatterGrads::finish(BucketReduction& r) {
    ctx_.transport->finish_reduce_scatter(r);
    const Range mine = intersect(bucket_of(ctx_, r).range, ctx_.owned);
    if (!mine.empty())
        flat_slice(ctx_.arena.grads(), mine.lo, mine.size())
            .copy_from(received_grads(ctx_, r, mine.size()));
    r.send = Tensor();
    r.recv = Tensor();
}

// ---- PartitionedGrads (stages 2-3) ----

PartitionedGrads::PartitionedGrads(ZeroContext& ctx) : ctx_(ctx), lent_(ctx.buckets.size()) {
    const std::vector<Parameter*>& params = ctx_.arena.params();
    for (size_t i = 0; i < params.size(); ++i) {
        const int b = ctx_.bucket_of[i];
        params[i]->var->bind_grad = [this, b](VarNode&) { bind(b); };
    }
}

void PartitionedGrads::bind(int b) {
    Tensor& buf = lent_[static_cast<size_t>(b)];
    if (buf.defined()) return;
    const Bucket& bk = ctx_.buckets[static_cast<size_t>(b)];
    const DType gt = ctx_.arena.options().grad_dtype;
    MemScope scope(ctx_.pool, MemPhase::kComm);
    buf = Tensor::zeros(ctx_.pool, {bk.range.size()}, gt, MemCategory::kComm);
    for (int i : bk.params) {
        Parameter& p = ctx_.param(i);
        p.grad = Tensor::view_of(buf.storage(), p.offset - bk.range.lo, p.shape, gt);
        p.var->grad = p.grad;
    }
}

Tensor PartitionedGrads::bucket_grads(int b) {
    bind(b);  // a bucket no parameter of which got a gradient reduces zeros
    return lent_[static_cast<size_t>(b)];
}

void PartitionedGrads::issue(BucketReduction& r, const Tensor& wire) {
    ctx_.transport->start_reduce_scatter(r, wire);
}

void PartitionedGrads::finish(BucketReduction& r) {
    ctx_.transport->finish_reduce_scatter(r);
    const Bucket& bk = bucket_of(ctx_, r);
    const Range mine = intersect(bk.range, ctx_.owned);
    if (!mine.empty()) {
        Tensor dst = flat_slice(ctx_.arena.grads(), mine.lo - ctx_.owned.lo, mine.size());
        kernels::add_inplace(dst, received_grads(ctx_, r, mine.size()));
    }
    for (int i : bk.params) {
        Parameter& q = ctx_.param(i);
        q.grad = Tensor();
        q.var->grad = Tensor();
    }
    lent_[static_cast<size_t>(r.bucket)] = Tensor();
    r.send = Tensor();
    r.recv = Tensor();
}

}  // namespace zt
