// The GradReduce of each stage (zero_grad_buckets.h): how one gradient bucket is reduced and
// where the result lands.
//   AllReduceGrads     stage 0: all-reduce in place; every rank holds the whole reduced gradient
//   ReduceScatterGrads stage 1: reduce-scatter of the whole gradient arena's bucket; the owned
//                      slice of the sum overwrites the (whole) arena's owned range
//   PartitionedGrads   stages 2-3: backward writes into a lent bucket buffer; the owned slice of
//                      the sum is added to the owned gradient range and the buffer is released
#pragma once

#include <vector>

#include "parallel/zero_grad_buckets.h"

namespace zt {

class AllReduceGrads final : public GradReduce {
  public:
    explicit AllReduceGrads(ZeroContext& ctx) : ctx_(ctx) {}
    bool partitioned() const override { return false; }
    Tensor bucket_grads(int b) override;
    void issue(BucketReduction& r, const Tensor& wire) override;
    void finish(BucketReduction& r) override;

  private:
    ZeroContext& ctx_;
};

class ReduceScatterGrads final : public GradReduce {
  public:
    explicit ReduceScatterGrads(ZeroContext& ctx) : ctx_(ctx) {}
    bool partitioned() const override { return false; }
    Tensor bucket_grads(int b) override;
    void issue(BucketReduction& r, const Tensor& wire) override;
    void finish(BucketReduction& r) override;

  private:
    ZeroContext& ctx_;
};

class PartitionedGrads final : public GradReduce {
  public:
    // Sets each parameter's bind_grad, so that backward's first gradient of a parameter lends
    // its bucket a buffer.
    explicit PartitionedGrads(ZeroContext& ctx);
    bool partitioned() const override { return true; }
    Tensor bucket_grads(int b) override;
    void issue(BucketReduction& r, const Tensor& wire) override;
    void finish(BucketReduction& r) override;

  private:
    void bind(int b);

    ZeroContext& ctx_;
    std::vector<Tensor> lent_;  // per bucket: gradient storage while backward fills it
};

}  // namespace zt
