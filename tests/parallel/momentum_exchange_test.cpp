// 1-bit Adam's momentum exchange (parallel/momentum_exchange.h) on the local backend, against its
// algorithm computed here for every rank in one thread from the codec's encode and decode:
//   v_r = x_r + worker_r; per segment s: e = encode(v_r[s]); worker_r[s] = v_r[s] - decode(e);
//   a_s = (decode(e_0s) + decode(e_1s) + ...) / R;  w = a_s + server_s; e = encode(w);
//   server_s = w - decode(e); every rank's x[s] = decode(e).
// Three rounds on 3 ranks over a length that no block or rank count divides: every rank holds
// the reference's bits; bytes by formula; the lossless codec gives the plain average; error
// feedback keeps the time-averaged error small; the residuals resume bit for bit.
#include "parallel/momentum_exchange.h"

#include <gtest/gtest.h>

#include <cmath>
#include <mutex>

#include "comm/local/local_comm.h"
#include "util/random.h"

namespace zt {
namespace {

constexpr int kRanks = 3;
constexpr int64_t kN = 1000;  // segments 333, 333, 334; blocks of 256

float input(int round, int rank, int64_t i) {
    return static_cast<float>(
        normal01(91 + round, static_cast<uint64_t>(rank), static_cast<uint64_t>(i)));
}

std::vector<int64_t> segments() {
    std::vector<int64_t> c;
    for (int r = 0; r < kRanks; ++r) c.push_back(kN * (r + 1) / kRanks - kN * r / kRanks);
    return c;
}

struct Reference {
    std::unique_ptr<Codec> codec;
    std::vector<std::vector<float>> worker, server;
    explicit Reference(const CodecOptions& o) : codec(make_codec(o)) {
        const std::vector<int64_t> c = segments();
        worker.assign(kRanks, std::vector<float>(kN, 0.0f));
        for (int r = 0; r < kRanks; ++r) server.emplace_back(c[static_cast<size_t>(r)], 0.0f);
    }
    // Encodes v (n values), returns the decoded values and leaves v - decoded in res.
    std::vector<float> carry(const float* v, int64_t n, float* res) {
        std::vector<uint8_t> e(static_cast<size_t>(codec->encoded_bytes(n)) + 4);
        codec->encode(v, n, e.data());
        std::vector<float> d(static_cast<size_t>(n));
        codec->decode(e.data(), n, d.data());
        for (int64_t i = 0; i < n; ++i) res[i] = v[i] - d[static_cast<size_t>(i)];
        return d;
    }
    // x[r]: each rank's values; returns what every rank holds after the exchange.
    std::vector<float> round(const std::vector<std::vector<float>>& x) {
        const std::vector<int64_t> c = segments();
        std::vector<float> out(kN);
        int64_t at = 0;
        for (int s = 0; s < kRanks; ++s) {
            const int64_t n = c[static_cast<size_t>(s)];
            std::vector<float> sum(static_cast<size_t>(n), 0.0f);
            for (int r = 0; r < kRanks; ++r) {
                std::vector<float> v(static_cast<size_t>(n));
                for (int64_t i = 0; i < n; ++i)
                    v[static_cast<size_t>(i)] = x[r][at + i] + worker[r][at + i];
                const std::vector<float> d = carry(v.data(), n, worker[r].data() + at);
                for (int64_t i = 0; i < n; ++i)
                    sum[static_cast<size_t>(i)] =
                        r == 0 ? d[static_cast<size_t>(i)]
                               : sum[static_cast<size_t>(i)] + d[static_cast<size_t>(i)];
            }
            std::vector<float> w(static_cast<size_t>(n));
            for (int64_t i = 0; i < n; ++i)
                w[static_cast<size_t>(i)] =
                    sum[static_cast<size_t>(i)] / float(kRanks) + server[s][static_cast<size_t>(i)];
            const std::vector<float> d = carry(w.data(), n, server[s].data());
            std::copy(d.begin(), d.end(), out.begin() + at);
            at += n;
        }
        return out;
    }
};

// Runs `rounds` exchanges on kRanks threads; returns each rank's output of each round.
std::vector<std::vector<std::vector<float>>> run(const CodecOptions& o, int rounds,
                                                 std::vector<CompressionStats>* stats = nullptr) {
    std::vector<std::vector<std::vector<float>>> got(
        kRanks, std::vector<std::vector<float>>(static_cast<size_t>(rounds)));
    std::mutex mu;
    run_local_ranks(kRanks, [&](Communicator& c) {
        MemoryPool pool;
        MomentumExchange ex(pool, c, kN, o);
        for (int t = 0; t < rounds; ++t) {
            std::vector<float> x(kN);
            for (int64_t i = 0; i < kN; ++i) x[static_cast<size_t>(i)] = input(t, c.rank(), i);
            ex.average(x.data());
            std::lock_guard<std::mutex> lock(mu);
            got[static_cast<size_t>(c.rank())][static_cast<size_t>(t)] = x;
        }
        if (stats) {
            std::lock_guard<std::mutex> lock(mu);
            (*stats)[static_cast<size_t>(c.rank())] = ex.stats();
        }
    });
    return got;
}

std::vector<std::vector<float>> inputs(int t) {
    std::vector<std::vector<float>> x(kRanks, std::vector<float>(kN));
    for (int r = 0; r < kRanks; ++r)
        for (int64_t i = 0; i < kN; ++i) x[r][static_cast<size_t>(i)] = input(t, r, i);
    return x;
}

TEST(MomentumExchange, OneBitMatchesTheAlgorithmOnEveryRank) {
    const CodecOptions o{CodecKind::kSign, 256, 0};
    std::vector<CompressionStats> stats(kRanks);
    const auto got = run(o, 3, &stats);
    Reference ref(o);
    for (int t = 0; t < 3; ++t) {
        const std::vector<float> want = ref.round(inputs(t));
        for (int r = 0; r < kRanks; ++r)
            for (int64_t i = 0; i < kN; ++i)
                ASSERT_EQ(got[r][t][static_cast<size_t>(i)], want[static_cast<size_t>(i)])
                    << "round " << t << " rank " << r << " element " << i;
    }
    // Per round, rank r sends its encodings of the other ranks' segments, then its own segment's
    // to each other rank: encoded_bytes per segment, a raw f32 all-reduce's bytes beside them.
    const std::unique_ptr<Codec> codec = make_codec(o);
    const std::vector<int64_t> c = segments();
    for (int r = 0; r < kRanks; ++r) {
        int64_t wire = 0, raw = 0;
        for (int s = 0; s < kRanks; ++s)
            if (s != r) {
                wire += codec->encoded_bytes(c[static_cast<size_t>(s)]);
                raw += 4 * c[static_cast<size_t>(s)];
            }
        wire += codec->encoded_bytes(c[static_cast<size_t>(r)]) * (kRanks - 1);
        raw += 4 * c[static_cast<size_t>(r)] * (kRanks - 1);
        EXPECT_EQ(stats[static_cast<size_t>(r)].wire_bytes, 3 * wire) << r;
        EXPECT_EQ(stats[static_cast<size_t>(r)].raw_bytes, 3 * raw) << r;
        // One bit a value and a scale per block: more than 20x below f32.
        EXPECT_GT(static_cast<double>(raw) / static_cast<double>(wire), 20.0);
    }
}

TEST(MomentumExchange, LosslessCodecGivesThePlainAverage) {
    const auto got = run({CodecKind::kF32, 256, 0}, 2);
    for (int t = 0; t < 2; ++t) {
        const auto x = inputs(t);
        for (int64_t i = 0; i < kN; ++i) {
            const auto k = static_cast<size_t>(i);
            const float want = ((x[0][k] + x[1][k]) + x[2][k]) / float(kRanks);
            for (int r = 0; r < kRanks; ++r) ASSERT_EQ(got[r][t][k], want) << t << " " << i;
        }
    }
}

TEST(MomentumExchange, ErrorFeedbackMakesTheRunningMeanConverge) {
    // The same inputs every round (the hardest case for 1 bit). Each round's output is far from
    // the average, but what the residuals keep joins the next rounds: the sum of the outputs'
    // errors over T rounds is the residuals at T (it telescopes). Without feedback it would grow
    // as T; with it, it grows far slower (the residuals of values above their block's scale grow
    // until the scale catches up; measured 13, 162, 347 after 1, 100, 800 rounds), and the
    // outputs' running mean converges to the average.
    auto want = [](int64_t i) {
        return (double(input(0, 0, i)) + input(0, 1, i) + input(0, 2, i)) / kRanks;
    };
    std::vector<double> at;  // |sum of errors| after rounds 1, 100 and 800 (rank 0)
    std::mutex mu;
    run_local_ranks(kRanks, [&](Communicator& c) {
        MemoryPool pool;
        MomentumExchange ex(pool, c, kN, {CodecKind::kSign, 256, 0});
        std::vector<double> acc(kN, 0.0);
        std::vector<double> norms;
        for (int t = 1; t <= 800; ++t) {
            std::vector<float> x(kN);
            for (int64_t i = 0; i < kN; ++i) x[static_cast<size_t>(i)] = input(0, c.rank(), i);
            ex.average(x.data());
            for (int64_t i = 0; i < kN; ++i)
                acc[static_cast<size_t>(i)] += x[static_cast<size_t>(i)] - want(i);
            if (t == 1 || t == 100 || t == 800) {
                double sq = 0;
                for (double e : acc) sq += e * e;
                norms.push_back(std::sqrt(sq));
            }
        }
        if (c.rank() == 0) {
            std::lock_guard<std::mutex> lock(mu);
            at = norms;
        }
    });
    ASSERT_EQ(at.size(), 3u);
    std::printf("[ onebit ] |sum of errors| after 1, 100, 800 rounds: %.3f %.3f %.3f\n", at[0],
                at[1], at[2]);
    EXPECT_GT(at[0], 0.2 * std::sqrt(double(kN))) << "1 bit loses much in one round";
    EXPECT_LT(at[2], 4.0 * at[1]) << "8x the rounds, far less than 8x the error";
    EXPECT_LT(at[2] / 800, at[0] / 15) << "the running mean converges to the average";
}

TEST(MomentumExchange, ResidualsResumeBitForBit) {
    const CodecOptions o{CodecKind::kSign, 256, 0};
    const auto whole = run(o, 3);
    std::vector<std::vector<float>> got(kRanks);
    std::mutex mu;
    run_local_ranks(kRanks, [&](Communicator& c) {
        std::vector<std::vector<float>> saved;
        std::string layout;
        {
            MemoryPool pool;
            MomentumExchange ex(pool, c, kN, o);
            for (int t = 0; t < 2; ++t) {
                std::vector<float> x(kN);
                for (int64_t i = 0; i < kN; ++i) x[static_cast<size_t>(i)] = input(t, c.rank(), i);
                ex.average(x.data());
            }
            for (Tensor* r : ex.residuals())
                saved.emplace_back(r->data<float>(), r->data<float>() + r->numel());
            layout = ex.residual_layout();
        }
        MemoryPool pool;
        MomentumExchange ex(pool, c, kN, o);
        EXPECT_EQ(ex.residual_layout(), layout);
        EXPECT_NE(layout.find("ranks=3 rank=" + std::to_string(c.rank())), std::string::npos);
        for (size_t i = 0; i < saved.size(); ++i) ex.load_residual(i, saved[i]);
        std::vector<float> x(kN);
        for (int64_t i = 0; i < kN; ++i) x[static_cast<size_t>(i)] = input(2, c.rank(), i);
        ex.average(x.data());
        EXPECT_THROW(ex.load_residual(1, std::vector<float>(5)), Error);
        std::lock_guard<std::mutex> lock(mu);
        got[static_cast<size_t>(c.rank())] = x;
    });
    for (int r = 0; r < kRanks; ++r) EXPECT_EQ(got[r], whole[r][2]) << r;
}

}  // namespace
}  // namespace zt
