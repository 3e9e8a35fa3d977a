// The PowerSGD transport (parallel/powersgd_transport.h) on the local backend, against the
// algorithm computed here in double from its definition (comm/powersgd.h): P = sum_k M_k Q,
// P^ = orth(P), Q' = sum_k M_k^T P^, out = P^ Q'^T for each compressed matrix, the plain sum
// for the rest; the residual e_k = M_k - out / R joins the next round's M_k, and Q' is the next
// round's Q (warm start). Two rounds (an all-reduce, then a reduce-scatter), 3 ranks, a bucket
// holding compressed matrices, vectors, a matrix too small to compress and the arena's padding.
#include "parallel/powersgd_transport.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <mutex>

#include "comm/local/local_comm.h"
#include "parallel/zero_grad_buckets.h"
#include "util/random.h"

namespace zt {
namespace {

struct Spec {
    const char* name;
    Shape shape;
    bool compressed;  // with rank 2 and min_compression_rate 1
};
const Spec kSpecs[] = {{"l1.weight", {24, 16}, true},
                       {"l1.bias", {24}, false},
                       {"l2.weight", {3, 4}, false},
                       {"l3.weight", {9, 20}, true},
                       {"l3.bias", {5}, false}};
constexpr int kRanks = 3, kRank = 2;

double grad_value(int round, int rank, int64_t i) {
    return normal01(77 + round, static_cast<uint64_t>(rank), static_cast<uint64_t>(i));
}

using Mat = std::vector<double>;  // row-major

void orth(Mat& p, int64_t rows, int64_t r) {  // modified Gram-Schmidt, as the transport's
    for (int64_t j = 0; j < r; ++j) {
        for (int64_t k = 0; k < j; ++k) {
            double dot = 0;
            for (int64_t i = 0; i < rows; ++i) dot += p[i * r + k] * p[i * r + j];
            for (int64_t i = 0; i < rows; ++i) p[i * r + j] -= dot * p[i * r + k];
        }
        double n = 0;
        for (int64_t i = 0; i < rows; ++i) n += p[i * r + j] * p[i * r + j];
        n = std::sqrt(n);
        for (int64_t i = 0; i < rows; ++i) p[i * r + j] = n > 0 ? p[i * r + j] / n : 0;
    }
}

// The reference: per rank the M of the round (gradient + residual), the Q per matrix.
struct Reference {
    int64_t padded = 0;
    std::vector<int64_t> offset;
    std::vector<Mat> residual;  // per rank, over the arena
    std::vector<Mat> q;         // per spec (compressed ones)

    explicit Reference(int64_t numel) {
        padded = (numel + kRanks - 1) / kRanks * kRanks;
        int64_t at = 0;
        for (const Spec& s : kSpecs) {
            offset.push_back(at);
            at += shape_numel(s.shape);
        }
        residual.assign(kRanks, Mat(static_cast<size_t>(padded), 0.0));
        for (const Spec& s : kSpecs) {
            q.emplace_back();
            if (!s.compressed) continue;
            std::vector<float> q0(static_cast<size_t>(s.shape[1] * R));
            powersgd_random_q(q0.data(), static_cast<int64_t>(q0.size()),
                              hash_string(s.name) ^ splitmix64(0));
            q.back().assign(q0.begin(), q0.end());
        }
    }
    static constexpr int64_t R = 2;

    // The summed bucket every rank receives in `round`.
    Mat run(int round) {
        std::vector<Mat> m(kRanks, Mat(static_cast<size_t>(padded), 0.0));
        for (int k = 0; k < kRanks; ++k)
            for (int64_t i = 0; i < padded; ++i)
                m[k][i] = (i < offset.back() + 5 ? grad_value(round, k, i) : 0.0) + residual[k][i];
        Mat out(static_cast<size_t>(padded), 0.0);
        for (int64_t i = 0; i < padded; ++i)
            for (int k = 0; k < kRanks; ++k) out[i] += m[k][i];  // the plain sum, overwritten below
        for (size_t s = 0; s < std::size(kSpecs); ++s) {
            if (!kSpecs[s].compressed) continue;
            const int64_t rows = kSpecs[s].shape[0], cols = kSpecs[s].shape[1], o = offset[s];
            Mat p(static_cast<size_t>(rows * R), 0.0), qs(static_cast<size_t>(cols * R), 0.0);
            for (int k = 0; k < kRanks; ++k)
                for (int64_t i = 0; i < rows; ++i)
                    for (int64_t j = 0; j < R; ++j)
                        for (int64_t c = 0; c < cols; ++c)
                            p[i * R + j] += m[k][o + i * cols + c] * q[s][c * R + j];
            orth(p, rows, R);
            for (int k = 0; k < kRanks; ++k)
                for (int64_t c = 0; c < cols; ++c)
                    for (int64_t j = 0; j < R; ++j)
                        for (int64_t i = 0; i < rows; ++i)
                            qs[c * R + j] += m[k][o + i * cols + c] * p[i * R + j];
            for (int64_t i = 0; i < rows; ++i)
                for (int64_t c = 0; c < cols; ++c) {
                    double v = 0;
                    for (int64_t j = 0; j < R; ++j) v += p[i * R + j] * qs[c * R + j];
                    out[o + i * cols + c] = v;
                    for (int k = 0; k < kRanks; ++k)
                        residual[k][o + i * cols + c] = m[k][o + i * cols + c] - v / kRanks;
                }
            q[s] = qs;
        }
        return out;
    }
};

TEST(PowerSgdTransport, MatchesTheAlgorithmAndEveryRankHoldsTheSameBits) {
    int64_t numel = 0;
    for (const Spec& s : kSpecs) numel += shape_numel(s.shape);
    Reference ref(numel);
    const Mat want1 = ref.run(1), want2 = ref.run(2);
    const int64_t padded = ref.padded;
    ASSERT_EQ(padded, numel + 1);  // one element of padding, reduced as a plain value

    std::mutex mu;
    std::vector<std::vector<float>> got1(kRanks), got2(kRanks);
    std::vector<CompressionStats> stats(kRanks);
    run_local_ranks(kRanks, [&](Communicator& c) {
        MemoryPool pool;
        std::vector<Parameter> params(std::size(kSpecs));
        std::vector<Parameter*> ptrs;
        for (size_t s = 0; s < params.size(); ++s) {
            params[s].name = kSpecs[s].name;
            params[s].shape = kSpecs[s].shape;
            ptrs.push_back(&params[s]);
        }
        ParamArena arena(pool, ptrs,
                         zero_arena_options(0, DType::kF32, DType::kF32, numel, kRanks, c.rank()));
        ZeroOptions zo;
        zo.grad_compression.enabled = true;
        zo.grad_compression.error_feedback = true;
        zo.grad_compression.powersgd = {true, 2, true, 1.0};
        ZeroContext ctx(pool, arena, &c, zo);
        ASSERT_EQ(ctx.buckets.size(), 1u);
        auto fill = [&](int round) {
            std::vector<float> g(static_cast<size_t>(padded), 0.0f);
            for (int64_t i = 0; i < numel; ++i)
                g[static_cast<size_t>(i)] = static_cast<float>(grad_value(round, c.rank(), i));
            Tensor t = Tensor::empty(pool, {padded}, DType::kF32, MemCategory::kGrads);
            std::memcpy(t.data<float>(), g.data(), g.size() * 4);
            return t;
        };
        // Round 1: an all-reduce, the whole bucket in place.
        Tensor wire = fill(1);
        BucketReduction r1;
        ctx.transport->start_all_reduce(r1, wire);
        r1.handle->wait();
        ctx.transport->finish_all_reduce(r1, wire);
        // Round 2: a reduce-scatter, this rank's segment.
        Tensor wire2 = fill(2);
        BucketReduction r2;
        ctx.transport->start_reduce_scatter(r2, wire2);
        r2.handle->wait();
        ctx.transport->finish_reduce_scatter(r2);
        std::lock_guard<std::mutex> lock(mu);
        const float* w = wire.data<float>();
        got1[static_cast<size_t>(c.rank())].assign(w, w + padded);
        const float* s = r2.recv.data<float>();
        got2[static_cast<size_t>(c.rank())].assign(s, s + r2.recv.numel());
        stats[static_cast<size_t>(c.rank())] = ctx.transport->stats();
    });

    double scale = 0;
    for (double v : want1) scale = std::max(scale, std::fabs(v));
    for (int64_t i = 0; i < padded; ++i)
        ASSERT_NEAR(got1[0][static_cast<size_t>(i)], want1[static_cast<size_t>(i)], 2e-4 * scale)
            << "round 1, element " << i;
    for (int k = 1; k < kRanks; ++k)
        EXPECT_EQ(std::memcmp(got1[k].data(), got1[0].data(), padded * 4), 0) << "rank " << k;
    // Round 2: each rank's segment of the padded arena.
    const int64_t seg = padded / kRanks;
    for (int k = 0; k < kRanks; ++k) {
        ASSERT_EQ(static_cast<int64_t>(got2[k].size()), seg);
        for (int64_t i = 0; i < seg; ++i)
            ASSERT_NEAR(got2[k][static_cast<size_t>(i)], want2[static_cast<size_t>(k * seg + i)],
                        2e-4 * scale)
                << "round 2, rank " << k << ", element " << i;
    }
    // Bytes by formula: P (24 x 2 + 9 x 2), the plain values (24 + 12 + 5 + 1 padding) and Q
    // (16 x 2 + 20 x 2) in f32 all-reduces, a rank sending 2 (R - 1) / R of them, per round.
    const int64_t values = 24 * 2 + 9 * 2 + 24 + 12 + 5 + 1 + 16 * 2 + 20 * 2;
    EXPECT_EQ(stats[kRank].wire_bytes, 2 * (4 * 2 * values * (kRanks - 1) / kRanks));
    EXPECT_EQ(stats[kRank].raw_bytes, 4 * 2 * padded * (kRanks - 1) / kRanks + 4 * (padded - seg));
    EXPECT_GT(stats[kRank].error_sq, 0);
}

TEST(PowerSgd, WhichMatricesTravelAsFactors) {
    const PowerSgdOptions o{true, 4, true, 2.0};
    EXPECT_FALSE(powersgd_compresses(1, 1000, o));  // a vector
    EXPECT_FALSE(powersgd_compresses(1000, 1, o));
    EXPECT_TRUE(powersgd_compresses(16, 16, o));   // 256 >= 2 x 32 x 4
    EXPECT_FALSE(powersgd_compresses(15, 16, o));  // 240 < 2 x 31 x 4
}

TEST(PowerSgd, OrthonormalizedColumnsSpanTheSameSpace) {
    const int64_t rows = 7, r = 3;
    std::vector<float> p(rows * r);
    for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<float>(normal01(5, 0, i));
    p[0 * r + 2] = p[0 * r + 0] * 2;  // column 2 = 2 x column 0: nothing left after projection
    for (int64_t i = 1; i < rows; ++i) p[i * r + 2] = p[i * r + 0] * 2;
    const std::vector<float> before = p;
    orthonormalize_columns(p.data(), rows, r);
    for (int64_t a = 0; a < 2; ++a)
        for (int64_t b = 0; b < 2; ++b) {
            double dot = 0;
            for (int64_t i = 0; i < rows; ++i) dot += p[i * r + a] * p[i * r + b];
            EXPECT_NEAR(dot, a == b ? 1.0 : 0.0, 1e-6);
        }
    for (int64_t i = 0; i < rows; ++i) EXPECT_EQ(p[i * r + 2], 0.0f) << i;
    // Column 1 before = a combination of the new columns 0 and 1 (the span is kept).
    double c0 = 0, c1 = 0;
    for (int64_t i = 0; i < rows; ++i) {
        c0 += before[i * r + 1] * p[i * r + 0];
        c1 += before[i * r + 1] * p[i * r + 1];
    }
    for (int64_t i = 0; i < rows; ++i)
        EXPECT_NEAR(before[i * r + 1], c0 * p[i * r + 0] + c1 * p[i * r + 1], 1e-5);
}

}  // namespace
}  // namespace zt
