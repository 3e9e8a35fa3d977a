// Compressed collectives (comm/compressed.h) on the local backend: with the lossless codec they
// give the plain reduce_scatter and all_reduce bits; with lossy codecs every rank decodes the same
// bits and the reduced segment is the rank-order sum of the decoded encodings. Counts are uneven
// and include an empty segment.
#include "comm/compressed.h"

#include <gtest/gtest.h>

#include <cstring>
#include <mutex>
#include <random>

#include "comm/local/local_comm.h"

namespace zt {
namespace {

std::vector<float> rank_values(int rank, int64_t n) {
    std::mt19937 rng(static_cast<uint32_t>(100 + rank));
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(n));
    for (auto& v : x) v = d(rng);
    return x;
}

std::vector<int64_t> uneven_counts(int R) {
    std::vector<int64_t> c;
    for (int r = 0; r < R; ++r) c.push_back(r == 1 ? 0 : 257 + 13 * r);  // rank 1: nothing
    return c;
}

// All-reduce as the engine does it: compressed reduce-scatter, then compressed all-gather.
std::vector<float> compressed_all_reduce(MemoryPool& pool, Communicator& c, const Codec& codec,
                                         const std::vector<int64_t>& counts,
                                         const std::vector<float>& x) {
    CompressedExchange ex(pool, c, codec, counts, CommType::kF32);
    std::vector<float> mine(static_cast<size_t>(counts[static_cast<size_t>(c.rank())]));
    ex.start_reduce_scatter(x.data(), nullptr)->wait();
    ex.finish_reduce_scatter(mine.data());
    std::vector<float> y(x.size());
    ex.start_all_gather(mine.data(), nullptr)->wait();
    ex.finish_all_gather(y.data());
    return y;
}

TEST(CompressedExchange, LosslessCodecGivesThePlainCollectivesBits) {
    for (int R : {1, 2, 3, 4}) {
        const auto counts = uneven_counts(R);
        int64_t n = 0;
        for (int64_t c : counts) n += c;
        auto codec = make_codec({CodecKind::kF32, 1, 0});
        run_local_ranks(R, [&](Communicator& c) {
            MemoryPool pool;
            const auto x = rank_values(c.rank(), n);
            auto plain = x;
            c.all_reduce(plain.data(), n, CommType::kF32)->wait();
            const auto y = compressed_all_reduce(pool, c, *codec, counts, x);
            ASSERT_EQ(std::memcmp(y.data(), plain.data(), x.size() * 4), 0) << "R " << R;

            const auto me = static_cast<size_t>(c.rank());
            std::vector<float> rs(static_cast<size_t>(counts[me])), crs(rs.size());
            c.reduce_scatter(x.data(), rs.data(), counts, CommType::kF32)->wait();
            CompressedExchange ex(pool, c, *codec, counts, CommType::kF32);
            ex.start_reduce_scatter(x.data(), nullptr)->wait();
            ex.finish_reduce_scatter(crs.data());
            // (an empty segment has null data(): no memcmp of it)
            ASSERT_TRUE(rs.empty() || std::memcmp(crs.data(), rs.data(), rs.size() * 4) == 0)
                << "R " << R;
            // Accounting: the plain collective's bytes against the encoded ones (equal here).
            EXPECT_EQ(ex.stats().raw_bytes, ex.stats().wire_bytes);
            EXPECT_EQ(ex.stats().raw_bytes, 4 * (n - counts[me]));
        });
    }
}

TEST(CompressedExchange, LossyCodecsDecodeTheSameBitsOnEveryRank) {
    const int R = 4;
    const auto counts = uneven_counts(R);
    int64_t n = 0;
    for (int64_t c : counts) n += c;
    for (CodecKind k : {CodecKind::kInt8, CodecKind::kInt4, CodecKind::kFp8E4M3, CodecKind::kTopK,
                        CodecKind::kBf16}) {
        auto codec = make_codec({k, 64, 0.1});
        std::vector<std::vector<float>> results(R);
        std::mutex mu;
        run_local_ranks(R, [&](Communicator& c) {
            MemoryPool pool;
            const auto y = compressed_all_reduce(pool, c, *codec, counts, rank_values(c.rank(), n));
            std::lock_guard lock(mu);
            results[static_cast<size_t>(c.rank())] = y;
        });
        // The reduced segments from the formula: decode every rank's encoding, sum in rank order,
        // encode that sum once more and decode it.
        std::vector<float> want(static_cast<size_t>(n), 0.0f);
        int64_t lo = 0;
        for (int64_t cnt : counts) {
            std::vector<float> seg(static_cast<size_t>(cnt), 0.0f), dec(seg.size());
            std::vector<uint8_t> bytes(static_cast<size_t>(codec->encoded_bytes(cnt)));
            for (int r = 0; r < R; ++r) {
                const auto x = rank_values(r, n);
                codec->encode(x.data() + lo, cnt, bytes.data());
                codec->decode(bytes.data(), cnt, dec.data());
                for (size_t i = 0; i < seg.size(); ++i) seg[i] = r == 0 ? dec[i] : seg[i] + dec[i];
            }
            codec->encode(seg.data(), cnt, bytes.data());
            codec->decode(bytes.data(), cnt, want.data() + lo);
            lo += cnt;
        }
        for (int r = 0; r < R; ++r)
            ASSERT_EQ(
                std::memcmp(results[static_cast<size_t>(r)].data(), want.data(), want.size() * 4),
                0)
                << codec_kind_name(k) << " rank " << r;
    }
}

TEST(CompressedExchange, Int8SendsAQuarterOfTheBytes) {
    const int R = 2;
    const std::vector<int64_t> counts{4096, 4096};
    auto codec = make_codec({CodecKind::kInt8, 256, 0});
    run_local_ranks(R, [&](Communicator& c) {
        MemoryPool pool;
        CompressedExchange ex(pool, c, *codec, counts, CommType::kF32);
        const auto x = rank_values(c.rank(), 8192);
        std::vector<float> mine(4096);
        ex.start_reduce_scatter(x.data(), nullptr)->wait();
        ex.finish_reduce_scatter(mine.data());
        // 4096 f32 against 4096 codes + 16 scales.
        EXPECT_EQ(ex.stats().raw_bytes, 4096 * 4);
        EXPECT_EQ(ex.stats().wire_bytes, 4096 + 16 * 4);
        EXPECT_EQ(c.stats().bytes_sent[static_cast<int>(CollectiveKind::kAllToAll)],
                  ex.stats().wire_bytes);
    });
}

}  // namespace
}  // namespace zt
