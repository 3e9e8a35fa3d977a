#include "parallel/powersgd_transport.h"

#include <algorithm>

#include "tensor/gemm.h"
#include "util/error.h"
#include "util/random.h"

namespace zt {

namespace {

// A matrix of a bucket that travels as factors; offsets count floats.
struct Matrix {
    int64_t at = 0;  // in the bucket
    int64_t rows = 0, cols = 0;
    int64_t p_at = 0, q_at = 0;  // in the bucket's P and Q buffers
    uint64_t seed = 0;           // its initial Q's (from the parameter's name)
};

// How one bucket travels: its matrices, the ranges sent as they are (vectors, small matrices,
// padding), and the buffer sizes.
struct BucketPlan {
    std::vector<Matrix> mats;
    std::vector<Range> plain;  // bucket offsets
    int64_t n = 0, p_total = 0, q_total = 0, plain_total = 0;
};

BucketPlan plan_bucket(const ZeroContext& ctx, const Bucket& bk, const PowerSgdOptions& o) {
    BucketPlan plan;
    plan.n = bk.range.size();
    std::vector<int> params = bk.params;
    std::sort(params.begin(), params.end(), [&](int a, int b) {
        return ctx.param_ranges[static_cast<size_t>(a)].lo <
               ctx.param_ranges[static_cast<size_t>(b)].lo;
    });
    int64_t covered = 0;  // bucket offset up to which plain ranges are planned
    for (int i : params) {
        const Parameter& p = ctx.param(i);
        const Range pr = ctx.param_ranges[static_cast<size_t>(i)];
        if (p.shape.size() < 2) continue;
        const int64_t rows = p.shape[0], cols = p.numel() / std::max<int64_t>(1, rows);
        if (!powersgd_compresses(rows, cols, o)) continue;
        Matrix m{pr.lo - bk.range.lo, rows, cols, plan.p_total, plan.q_total, hash_string(p.name)};
        if (m.at > covered) plan.plain.push_back({covered, m.at});
        covered = m.at + rows * cols;
        plan.p_total += rows * o.rank;
        plan.q_total += cols * o.rank;
        plan.mats.push_back(m);
    }
    if (covered < plan.n) plan.plain.push_back({covered, plan.n});
    for (const Range& r : plan.plain) plan.plain_total += r.size();
    return plan;
}

// Bytes a rank sends in a ring all-reduce of n values of `size` bytes: the counting of
// CompressedExchange (a reduce-scatter then an all-gather).
int64_t all_reduce_bytes(int64_t n, int ranks, int64_t size) {
    return size * 2 * n * (ranks - 1) / ranks;
}

class PowerSgdTransport final : public GradTransport {
  public:
    PowerSgdTransport(ZeroContext& ctx, const GradCompressionOptions& o)
        : ctx_(ctx), o_(o.powersgd), error_feedback_(o.error_feedback) {
        ZT_CHECK(o_.rank >= 1, "powersgd rank must be at least 1, got ", o_.rank);
        for (const Bucket& bk : ctx_.buckets) {
            plans_.push_back(plan_bucket(ctx_, bk, o_));
            const BucketPlan& plan = plans_.back();
            Tensor q = Tensor::empty(ctx_.pool, {std::max<int64_t>(1, plan.q_total)}, DType::kF32,
                                     MemCategory::kOptimizer);
            for (const Matrix& m : plan.mats) fresh_q(q.data<float>() + m.q_at, m, 0);
            q_.push_back(q);
        }
        residual_.resize(ctx_.buckets.size());
        rounds_.assign(ctx_.buckets.size(), 0);
    }

    void start_all_reduce(BucketReduction& r, const Tensor& wire) override { start(r, wire); }

    void finish_all_reduce(BucketReduction& r, const Tensor& wire) override {
        Tensor out = rebuild(r, all_reduce_bytes(r.f32.numel(), ctx_.ranks,
                                                 static_cast<int64_t>(dtype_size(wire.dtype()))));
        Tensor(wire).copy_from(out);  // a view: writes the bucket
    }

    void start_reduce_scatter(BucketReduction& r, const Tensor& wire) override { start(r, wire); }

    void finish_reduce_scatter(BucketReduction& r) override {
        const Bucket& bk = ctx_.buckets[static_cast<size_t>(r.bucket)];
        const std::vector<int64_t> counts = rank_counts(bk.range, ctx_.padded(), ctx_.ranks);
        int64_t lo = 0;
        for (int k = 0; k < ctx_.rank; ++k) lo += counts[static_cast<size_t>(k)];
        const int64_t mine = counts[static_cast<size_t>(ctx_.rank)];
        Tensor out = rebuild(r, raw_size_ * (bk.range.size() - mine));
        MemScope scope(ctx_.pool, MemPhase::kComm);
        r.recv = Tensor::empty(ctx_.pool, {mine}, DType::kF32, MemCategory::kComm);
        r.recv.copy_from(flat_slice(out, lo, mine));
    }

    CompressionStats stats() const override { return stats_; }

    // Per bucket: the residual (when error feedback is on), then Q (when warm start is on).
    std::vector<Tensor*> residuals() override {
        std::vector<Tensor*> out;
        for (size_t b = 0; b < plans_.size(); ++b) {
            if (error_feedback_) out.push_back(&residual_[b]);
            if (o_.warm_start) out.push_back(&q_[b]);
        }
        return out;
    }

    std::string residual_layout() const override {
        if (!error_feedback_ && !o_.warm_start) return {};
        std::string s = str_cat("powersgd rank ", o_.rank, error_feedback_ ? " ef" : "",
                                o_.warm_start ? " warm" : "", " ranks ", ctx_.ranks, " rank ",
                                ctx_.rank, " buckets");
        for (const Bucket& b : ctx_.buckets) s += str_cat(" ", b.range.lo, "-", b.range.hi);
        return s;
    }

    void load_residual(size_t i, std::span<const float> data) override {
        const size_t per = (error_feedback_ ? 1 : 0) + (o_.warm_start ? 1 : 0);
        ZT_ASSERT(per > 0 && i / per < plans_.size(), "PowerSGD state ", i, " out of range");
        const size_t b = i / per;
        const bool is_q = !error_feedback_ || i % per == 1;
        const int64_t n = is_q ? plans_[b].q_total : plans_[b].n;
        ZT_CHECK(static_cast<int64_t>(data.size()) == n || (is_q && n == 0), "PowerSGD state ", i,
                 ": ", data.size(), " values, the bucket needs ", n);
        float* dst = is_q ? q_[b].data<float>() : residual(static_cast<int>(b));
        std::copy(data.begin(), data.begin() + n, dst);
    }

  private:
    void fresh_q(float* q, const Matrix& m, uint64_t round) const {
        powersgd_random_q(q, m.cols * o_.rank, m.seed ^ splitmix64(round));
    }

    float* residual(int bucket) {
        Tensor& t = residual_[static_cast<size_t>(bucket)];
        if (!t.defined())
            t = Tensor::zeros(ctx_.pool, {plans_[static_cast<size_t>(bucket)].n}, DType::kF32,
                              MemCategory::kOptimizer);
        return t.data<float>();
    }

    // M = the bucket (+ residual) in r.f32; P = M Q and the plain values in r.aux, all-reduced.
    void start(BucketReduction& r, const Tensor& wire) {
        MemScope scope(ctx_.pool, MemPhase::kComm);
        const BucketPlan& plan = plans_[static_cast<size_t>(r.bucket)];
        raw_size_ = static_cast<int64_t>(dtype_size(wire.dtype()));
        r.f32 = Tensor::empty(ctx_.pool, {plan.n}, DType::kF32, MemCategory::kComm);
        r.f32.copy_from(wire);
        float* m = r.f32.data<float>();
        if (error_feedback_) {
            const float* e = residual(r.bucket);
            for (const Matrix& x : plan.mats)
                for (int64_t i = x.at; i < x.at + x.rows * x.cols; ++i) m[i] += e[i];
        }
        if (!o_.warm_start) {
            for (const Matrix& x : plan.mats)
                fresh_q(q_[static_cast<size_t>(r.bucket)].data<float>() + x.q_at, x,
                        ++rounds_[static_cast<size_t>(r.bucket)]);
        }
        const int64_t np = plan.p_total + plan.plain_total;
        r.aux =
            Tensor::empty(ctx_.pool, {std::max<int64_t>(1, np)}, DType::kF32, MemCategory::kComm);
        float* p = r.aux.data<float>();
        const float* q = q_[static_cast<size_t>(r.bucket)].data<float>();
        for (const Matrix& x : plan.mats)
            gemm(x.rows, o_.rank, x.cols, 1.0f, {m + x.at, x.cols, false},
                 {q + x.q_at, o_.rank, false}, DType::kF32, 0.0f, p + x.p_at, o_.rank, DType::kF32);
        int64_t at = plan.p_total;
        for (const Range& g : plan.plain) {
            std::copy(m + g.lo, m + g.hi, p + at);
            at += g.size();
        }
        r.handle = ctx_.comm->all_reduce(p, np, CommType::kF32);
        r.finish_communicates = true;  // the Q all-reduce
    }

    // After P's all-reduce: orthonormal P, Q = M^T P summed, out = P Q^T and the plain sums.
    // Updates the residual, Q (warm start) and the stats; returns the bucket's rebuilt sum.
    Tensor rebuild(BucketReduction& r, int64_t raw_bytes) {
        MemScope scope(ctx_.pool, MemPhase::kComm);
        const size_t b = static_cast<size_t>(r.bucket);
        const BucketPlan& plan = plans_[b];
        const int R = o_.rank;
        float* p = r.aux.data<float>();
        const float* m = r.f32.data<float>();
        for (const Matrix& x : plan.mats) orthonormalize_columns(p + x.p_at, x.rows, R);
        Tensor qsum = Tensor::empty(ctx_.pool, {std::max<int64_t>(1, plan.q_total)}, DType::kF32,
                                    MemCategory::kComm);
        float* q = qsum.data<float>();
        for (const Matrix& x : plan.mats)
            gemm(x.cols, R, x.rows, 1.0f, {m + x.at, x.cols, true}, {p + x.p_at, R, false},
                 DType::kF32, 0.0f, q + x.q_at, R, DType::kF32);
        if (plan.q_total > 0)
            ctx_.wait_exposed(ctx_.comm->all_reduce(q, plan.q_total, CommType::kF32));
        Tensor out = Tensor::empty(ctx_.pool, {plan.n}, DType::kF32, MemCategory::kComm);
        float* o = out.data<float>();
        for (const Matrix& x : plan.mats)
            gemm(x.rows, x.cols, R, 1.0f, {p + x.p_at, R, false}, {q + x.q_at, R, true},
                 DType::kF32, 0.0f, o + x.at, x.cols, DType::kF32);
        int64_t at = plan.p_total;
        for (const Range& g : plan.plain) {
            std::copy(p + at, p + at + g.size(), o + g.lo);
            at += g.size();
        }
        // What this rank's share of the rebuilt sum misses of its own M: the residual.
        const float share = 1.0f / static_cast<float>(ctx_.ranks);
        float* e = error_feedback_ ? residual(r.bucket) : nullptr;
        double err = 0, in = 0;
        for (const Matrix& x : plan.mats)
            for (int64_t i = x.at; i < x.at + x.rows * x.cols; ++i) {
                const float d = m[i] - o[i] * share;
                if (e) e[i] = d;
                err += static_cast<double>(d) * d;
                in += static_cast<double>(m[i]) * m[i];
            }
        if (o_.warm_start && plan.q_total > 0) std::copy(q, q + plan.q_total, q_[b].data<float>());
        stats_.error_sq += err;
        stats_.input_sq += in;
        stats_.raw_bytes += raw_bytes;
        stats_.wire_bytes +=
            all_reduce_bytes(plan.p_total + plan.plain_total + plan.q_total, ctx_.ranks, 4);
        r.f32 = Tensor();
        r.aux = Tensor();
        return out;
    }

    ZeroContext& ctx_;
    PowerSgdOptions o_;
    bool error_feedback_;
    std::vector<BucketPlan> plans_;
    std::vector<Tensor> q_;         // per bucket, the factors Q of its matrices
    std::vector<Tensor> residual_;  // per bucket, made at first use
    CompressionStats stats_;
    int64_t raw_size_ = 4;          // bytes per value of the bucket's plain collective
    std::vector<uint64_t> rounds_;  // per bucket, reductions so far: fresh Q's stream
};

}  // namespace

std::unique_ptr<GradTransport> make_powersgd_transport(ZeroContext& ctx,
                                                       const GradCompressionOptions& o) {
    return std::make_unique<PowerSgdTransport>(ctx, o);
}

}  // namespace zt
