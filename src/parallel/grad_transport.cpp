#include "parallel/grad_transport.h"

#include <algorithm>

#include "parallel/powersgd_transport.h"
#include "util/error.h"

namespace zt {

namespace {

std::vector<int64_t> bucket_counts(const ZeroContext& ctx, const BucketReduction& r) {
    return rank_counts(ctx.buckets[static_cast<size_t>(r.bucket)].range, ctx.padded(), ctx.ranks);
}

// The collectives of communicator.h in the bucket's dtype (communication_data_type).
class PlainTransport final : public GradTransport {
  public:
    explicit PlainTransport(ZeroContext& ctx) : ctx_(ctx) {}

    void start_all_reduce(BucketReduction& r, const Tensor& wire) override {
        if (ctx_.ranks > 1)
            r.handle = ctx_.comm->all_reduce(wire.raw(), wire.numel(), comm_type_of(wire.dtype()));
    }
    void finish_all_reduce(BucketReduction&, const Tensor&) override {}

    void start_reduce_scatter(BucketReduction& r, const Tensor& wire) override {
        std::vector<int64_t> counts = bucket_counts(ctx_, r);
        r.recv = Tensor::empty(ctx_.pool, {counts[static_cast<size_t>(ctx_.rank)]}, wire.dtype(),
                               MemCategory::kComm);
        if (ctx_.ranks > 1)
            r.handle = ctx_.comm->reduce_scatter(wire.raw(), r.recv.raw(), counts,
                                                 comm_type_of(wire.dtype()));
        else
            r.recv.copy_from(wire);
    }
    void finish_reduce_scatter(BucketReduction&) override {}

  private:
    ZeroContext& ctx_;
};

// A codec's bytes over comm/compressed.h's exchanges (more than one rank).
class CompressedTransport final : public GradTransport {
  public:
    CompressedTransport(ZeroContext& ctx, const GradCompressionOptions& o)
        : ctx_(ctx),
          codec_(make_codec(o.codec)),
          error_feedback_(o.error_feedback),
          worker_(ctx.buckets.size()),
          server_(ctx.buckets.size()) {}

    void start_all_reduce(BucketReduction& r, const Tensor& wire) override {
        start(r, wire);
        r.finish_communicates = true;  // the all-gather half
    }

    void finish_all_reduce(BucketReduction& r, const Tensor& wire) override {
        MemScope scope(ctx_.pool, MemPhase::kComm);
        const int64_t mine = bucket_counts(ctx_, r)[static_cast<size_t>(ctx_.rank)];
        Tensor reduced = Tensor::empty(ctx_.pool, {mine}, DType::kF32, MemCategory::kComm);
        r.exchange->finish_reduce_scatter(reduced.data<float>());
        ctx_.wait_exposed(
            r.exchange->start_all_gather(reduced.data<float>(), residual(server_, r.bucket, mine)));
        const Tensor& out = r.f32.defined() ? r.f32 : wire;
        r.exchange->finish_all_gather(out.data<float>());
        if (r.f32.defined()) Tensor(wire).copy_from(r.f32);  // a view: writes the bucket
        done(r);
    }

    void start_reduce_scatter(BucketReduction& r, const Tensor& wire) override { start(r, wire); }

    void finish_reduce_scatter(BucketReduction& r) override {
        MemScope scope(ctx_.pool, MemPhase::kComm);
        const int64_t mine = bucket_counts(ctx_, r)[static_cast<size_t>(ctx_.rank)];
        r.recv = Tensor::empty(ctx_.pool, {mine}, DType::kF32, MemCategory::kComm);
        r.exchange->finish_reduce_scatter(r.recv.data<float>());
        done(r);
    }

    CompressionStats stats() const override { return stats_; }

    std::vector<Tensor*> residuals() override {
        std::vector<Tensor*> out;
        if (!error_feedback_) return out;
        for (size_t b = 0; b < worker_.size(); ++b) {
            out.push_back(&worker_[b]);
            out.push_back(&server_[b]);
        }
        return out;
    }

    std::string residual_layout() const override {
        if (!error_feedback_) return {};
        std::string s = str_cat(codec_kind_name(codec_->kind()), " ranks ", ctx_.ranks, " rank ",
                                ctx_.rank, " buckets");
        for (const Bucket& b : ctx_.buckets) s += str_cat(" ", b.range.lo, "-", b.range.hi);
        return s;
    }

    void load_residual(size_t i, std::span<const float> data) override {
        const size_t b = i / 2;
        ZT_ASSERT(error_feedback_ && b < worker_.size(), "residual ", i, " out of range");
        const int64_t n = i % 2 == 0 ? ctx_.buckets[b].range.size()
                                     : rank_counts(ctx_.buckets[b].range, ctx_.padded(),
                                                   ctx_.ranks)[static_cast<size_t>(ctx_.rank)];
        ZT_CHECK(static_cast<int64_t>(data.size()) == n, "error-feedback residual ", i, ": ",
                 data.size(), " values, the bucket needs ", n);
        float* dst = residual(i % 2 == 0 ? worker_ : server_, static_cast<int>(b), n);
        std::copy(data.begin(), data.end(), dst);
    }

  private:
    // Encodes the bucket (in f32) and issues the reduce-scatter half.
    void start(BucketReduction& r, const Tensor& wire) {
        MemScope scope(ctx_.pool, MemPhase::kComm);
        const std::vector<int64_t> counts = bucket_counts(ctx_, r);
        Tensor src = wire;
        if (wire.dtype() != DType::kF32) {
            r.f32 = Tensor::empty(ctx_.pool, {wire.numel()}, DType::kF32, MemCategory::kComm);
            r.f32.copy_from(wire);
            src = r.f32;
        }
        r.exchange = std::make_unique<CompressedExchange>(ctx_.pool, *ctx_.comm, *codec_, counts,
                                                          comm_type_of(wire.dtype()));
        r.handle = r.exchange->start_reduce_scatter(src.data<float>(),
                                                    residual(worker_, r.bucket, wire.numel()));
    }

    void done(BucketReduction& r) {
        stats_.add(r.exchange->stats());
        r.exchange.reset();
    }

    // The bucket's residual in `set` (n values, zeros at first), or null without error feedback.
    float* residual(std::vector<Tensor>& set, int bucket, int64_t n) {
        if (!error_feedback_) return nullptr;
        Tensor& t = set[static_cast<size_t>(bucket)];
        if (!t.defined()) t = Tensor::zeros(ctx_.pool, {n}, DType::kF32, MemCategory::kOptimizer);
        return t.data<float>();
    }

    ZeroContext& ctx_;
    std::unique_ptr<Codec> codec_;
    bool error_feedback_;
    std::vector<Tensor> worker_, server_;  // per bucket
    CompressionStats stats_;
};

// Note [Uncompressed warm-up]
// compression.gradients.start_step N (PyTorch's start_powerSGD_iter, 1-bit Adam's freeze_step):
// the reductions of optimizer steps 1..N travel through the plain collectives, so those steps
// are the uncompressed run's bits; from step N + 1 the codec's transport takes over. Codecs that
// drop most of each step (top-k, onebit) cost most in the first steps, where the gradients are
// large and change fast (measured in docs/compression.md, "Recommended settings"). The codec's
// residuals are made at its first reduction (zeros) and PowerSGD's Q is its initial draw, so
// compression starts from zero state. The switch is by the engine's step
// count (restored on resume), between steps, never with a reduction in flight; the state
// checkpointed is the codec's (none made yet during the warm-up).
class WarmupTransport final : public GradTransport {
  public:
    WarmupTransport(ZeroContext& ctx, std::unique_ptr<GradTransport> compressed, int64_t start_step)
        : plain_(ctx), compressed_(std::move(compressed)), start_step_(start_step) {}

    void begin_step(int64_t steps_done) override { plain_now_ = steps_done < start_step_; }
    void start_all_reduce(BucketReduction& r, const Tensor& wire) override {
        now().start_all_reduce(r, wire);
    }
    void finish_all_reduce(BucketReduction& r, const Tensor& wire) override {
        now().finish_all_reduce(r, wire);
    }
    void start_reduce_scatter(BucketReduction& r, const Tensor& wire) override {
        now().start_reduce_scatter(r, wire);
    }
    void finish_reduce_scatter(BucketReduction& r) override { now().finish_reduce_scatter(r); }
    CompressionStats stats() const override { return compressed_->stats(); }
    std::vector<Tensor*> residuals() override { return compressed_->residuals(); }
    std::string residual_layout() const override { return compressed_->residual_layout(); }
    void load_residual(size_t i, std::span<const float> data) override {
        compressed_->load_residual(i, data);
    }

  private:
    GradTransport& now() { return plain_now_ ? static_cast<GradTransport&>(plain_) : *compressed_; }

    PlainTransport plain_;
    std::unique_ptr<GradTransport> compressed_;
    int64_t start_step_;
    bool plain_now_ = true;  // until begin_step says otherwise: step 1
};

std::unique_ptr<GradTransport> make_compressed(ZeroContext& ctx, const GradCompressionOptions& o) {
    if (o.powersgd.enabled) return make_powersgd_transport(ctx, o);
    return std::make_unique<CompressedTransport>(ctx, o);
}

}  // namespace

std::unique_ptr<GradTransport> make_grad_transport(ZeroContext& ctx,
                                                   const GradCompressionOptions& o) {
    if (!o.enabled || ctx.ranks == 1) return std::make_unique<PlainTransport>(ctx);
    ZT_CHECK(o.start_step >= 0, "compression.gradients.start_step: expected an integer >= 0, got ",
             o.start_step);
    if (o.start_step == 0) return make_compressed(ctx, o);
    return std::make_unique<WarmupTransport>(ctx, make_compressed(ctx, o), o.start_step);
}

}  // namespace zt
