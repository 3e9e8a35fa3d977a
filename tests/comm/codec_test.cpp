// Codecs (comm/codec/codec.h): each kind's error against its bound over sizes that do not divide
// the block or the SIMD width, decode_add against decode, non-finite values, top-k's selection,
// and error feedback's bounded residual.
#include "comm/codec/codec.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "comm/compressed.h"
#include "tensor/kernels/fake_quant.h"

namespace zt {
namespace {

constexpr int64_t kSizes[] = {1, 3, 7, 255, 256, 257, 1000, 4099};

std::vector<float> values(int64_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(n));
    for (auto& v : x) v = d(rng) * (1.0f + static_cast<float>(rng() % 100));  // mixed magnitudes
    return x;
}

std::vector<float> round_trip(const Codec& c, const std::vector<float>& x) {
    const auto n = static_cast<int64_t>(x.size());
    std::vector<uint8_t> bytes(static_cast<size_t>(c.encoded_bytes(n)));
    c.encode(x.data(), n, bytes.data());
    std::vector<float> y(x.size());
    c.decode(bytes.data(), n, y.data());
    return y;
}

// The largest error a blockwise value may have: half a step of the format at that value, where
// the scale s = max|block| / qmax (fake_quant.h's formats; int4's qmax is 7).
float block_bound(CodecKind k, float v, float s) {
    const float a = std::fabs(v) / s;  // in units of the scale
    switch (k) {
        case CodecKind::kInt8:
        case CodecKind::kInt4:
            return 0.5f * s;
        case CodecKind::kFp8E4M3:  // 3 mantissa bits; subnormal step 2^-9
            return std::max(a * 0.0625f, std::ldexp(1.0f, -10)) * s;
        default:  // e5m2: 2 mantissa bits; subnormal step 2^-16
            return std::max(a * 0.125f, std::ldexp(1.0f, -17)) * s;
    }
}

float qmax_of(CodecKind k) {
    switch (k) {
        case CodecKind::kInt8:
            return 127.0f;
        case CodecKind::kInt4:
            return 7.0f;
        case CodecKind::kFp8E4M3:
            return 448.0f;
        default:
            return 57344.0f;
    }
}

TEST(Codec, BlockwiseErrorWithinHalfAStepOfTheFormat) {
    for (CodecKind k :
         {CodecKind::kInt8, CodecKind::kInt4, CodecKind::kFp8E4M3, CodecKind::kFp8E5M2}) {
        for (int64_t block : {1, 7, 256}) {
            auto c = make_codec({k, block, 0});
            for (int64_t n : kSizes) {
                const auto x = values(n, static_cast<uint32_t>(n + block));
                const auto y = round_trip(*c, x);
                EXPECT_EQ(c->encoded_bytes(n) % 4, 0);
                for (int64_t lo = 0; lo < n; lo += block) {
                    float amax = 0;
                    for (int64_t i = lo; i < std::min(n, lo + block); ++i)
                        amax = std::max(amax, std::fabs(x[static_cast<size_t>(i)]));
                    const float s = amax / qmax_of(k);
                    for (int64_t i = lo; i < std::min(n, lo + block); ++i) {
                        const auto u = static_cast<size_t>(i);
                        // 1e-6 relative: the scale's own rounding (amax / qmax, then x qmax / amax)
                        ASSERT_LE(std::fabs(y[u] - x[u]),
                                  block_bound(k, x[u], s) * (1 + 1e-5f) + 1e-6f * amax)
                            << codec_kind_name(k) << " block " << block << " n " << n << " i " << i;
                    }
                }
            }
        }
    }
}

TEST(Codec, Fp8CodesAreFakeQuantsCodes) {
    // A block whose largest magnitude is qmax has scale 1: each value's decoded result must be
    // fake_quant.h's rounding of it, over a sweep through subnormals, normals and rounding ties.
    for (CodecKind k : {CodecKind::kFp8E4M3, CodecKind::kFp8E5M2}) {
        const QuantFormat f =
            k == CodecKind::kFp8E4M3 ? QuantFormat::kFp8E4M3 : QuantFormat::kFp8E5M2;
        const float qmax = quant_format_max(f);
        std::vector<float> x{qmax};
        for (float v = std::ldexp(1.0f, -20); v < qmax; v *= 1.0137f) {
            x.push_back(v);
            x.push_back(-v * 1.00001f);
        }
        for (int e = -17; e < 15; ++e)  // exact ties between neighbours of each binade
            for (float m : {1.0625f, 1.1875f, 1.125f, 1.375f})
                if (std::ldexp(m, e) < qmax) x.push_back(std::ldexp(m, e));
        auto c = make_codec({k, static_cast<int64_t>(x.size()), 0});
        const auto y = round_trip(*c, x);
        for (size_t i = 0; i < x.size(); ++i)
            ASSERT_EQ(y[i], quant_decode(quant_encode(quant_round(x[i], f), f), f))
                << codec_kind_name(k) << " x " << x[i];
    }
}

TEST(Codec, OneBitSendsSignsTimesTheBlocksMeanMagnitude) {
    for (int64_t block : {1, 5, 256}) {
        auto c = make_codec({CodecKind::kSign, block, 0});
        for (int64_t n : kSizes) {
            const auto x = values(n, static_cast<uint32_t>(7 * n + block));
            const auto y = round_trip(*c, x);
            // Bytes: the scales and one bit a value, padded to 4.
            EXPECT_EQ(c->encoded_bytes(n), ((n + block - 1) / block * 4 + (n + 7) / 8 + 3) / 4 * 4);
            for (int64_t lo = 0; lo < n; lo += block) {
                const int64_t hi = std::min(n, lo + block);
                float sum = 0;
                for (int64_t i = lo; i < hi; ++i) sum += std::fabs(x[static_cast<size_t>(i)]);
                const float s = sum / static_cast<float>(hi - lo);
                for (int64_t i = lo; i < hi; ++i) {
                    const auto u = static_cast<size_t>(i);
                    ASSERT_EQ(y[u], x[u] >= 0 ? s : -s) << "block " << block << " n " << n;
                }
            }
        }
    }
}

TEST(Codec, SizesOfTheEncodings) {
    // Formulas: nb = ceil(n / block) f32 scales plus the codes, padded to 4 bytes.
    const int64_t n = 1000, nb = 4;  // block 256
    EXPECT_EQ(make_codec({CodecKind::kInt8, 256, 0})->encoded_bytes(n), nb * 4 + n);
    EXPECT_EQ(make_codec({CodecKind::kInt4, 256, 0})->encoded_bytes(n), nb * 4 + n / 2);
    EXPECT_EQ(make_codec({CodecKind::kInt4, 256, 0})->encoded_bytes(7), 4 + 4);  // 4 code bytes
    EXPECT_EQ(make_codec({CodecKind::kFp8E4M3, 256, 0})->encoded_bytes(n), nb * 4 + n);
    EXPECT_EQ(make_codec({CodecKind::kBf16, 256, 0})->encoded_bytes(7), 16);
    EXPECT_EQ(make_codec({CodecKind::kF32, 256, 0})->encoded_bytes(7), 28);
    EXPECT_EQ(make_codec({CodecKind::kTopK, 256, 0.01})->encoded_bytes(n), 8 * 10);
    EXPECT_EQ(make_codec({CodecKind::kTopK, 256, 0.01})->encoded_bytes(3), 8);  // at least one
    for (CodecKind k : {CodecKind::kInt8, CodecKind::kTopK, CodecKind::kF16})
        EXPECT_EQ(make_codec({k, 256, 0.5})->encoded_bytes(0), 0);
}

TEST(Codec, CastsRoundToNearestEvenAndF32IsExact) {
    const auto x = values(4099, 5);
    EXPECT_EQ(round_trip(*make_codec({CodecKind::kF32, 1, 0}), x), x);
    const auto b = round_trip(*make_codec({CodecKind::kBf16, 1, 0}), x);
    const auto h = round_trip(*make_codec({CodecKind::kF16, 1, 0}), x);
    for (size_t i = 0; i < x.size(); ++i) {
        ASSERT_EQ(b[i], bf16_to_f32(f32_to_bf16(x[i])));
        ASSERT_EQ(h[i], f16_to_f32(f32_to_f16(x[i])));
    }
}

TEST(Codec, DecodeAddAddsTheDecodedValues) {
    for (CodecKind k :
         {CodecKind::kF32, CodecKind::kBf16, CodecKind::kF16, CodecKind::kInt8, CodecKind::kInt4,
          CodecKind::kFp8E4M3, CodecKind::kFp8E5M2, CodecKind::kTopK}) {
        auto c = make_codec({k, 7, 0.1});
        const auto x = values(257, 9);
        const auto dec = round_trip(*c, x);
        std::vector<uint8_t> bytes(static_cast<size_t>(c->encoded_bytes(257)));
        c->encode(x.data(), 257, bytes.data());
        auto acc = values(257, 10);
        const auto before = acc;
        c->decode_add(bytes.data(), 257, acc.data());
        for (size_t i = 0; i < acc.size(); ++i)
            ASSERT_EQ(acc[i], before[i] + dec[i]) << codec_kind_name(k) << " " << i;
    }
}

TEST(Codec, NonFiniteValuesStayNonFinite) {
    // The loss scaler must still see an overflow after compression.
    for (CodecKind k : {CodecKind::kInt8, CodecKind::kInt4, CodecKind::kFp8E4M3, CodecKind::kTopK,
                        CodecKind::kBf16, CodecKind::kSign}) {
        auto c = make_codec({k, 4, 0.1});
        for (float bad :
             {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
            auto x = values(40, 3);
            x[13] = bad;
            const auto y = round_trip(*c, x);
            EXPECT_FALSE(std::isfinite(y[13])) << codec_kind_name(k);
            if (k != CodecKind::kTopK && k != CodecKind::kBf16) {  // blocks: 12..15 all NaN
                EXPECT_TRUE(std::isnan(y[12]) && std::isnan(y[15])) << codec_kind_name(k);
            }
            EXPECT_TRUE(std::isfinite(y[0]) && std::isfinite(y[39])) << codec_kind_name(k);
        }
    }
}

TEST(Codec, TopKKeepsTheLargestMagnitudesTiesToTheLowerIndex) {
    auto c = make_codec({CodecKind::kTopK, 1, 0.3});  // ceil(0.3 x 10) = 3 of 10
    const std::vector<float> x{0.5f, -4.0f, 1.0f, 2.0f, -2.0f, 0.0f, 2.0f, 0.1f, -0.2f, 1.5f};
    const auto y = round_trip(*c, x);
    // -4 at 1; then the three 2s tie: indices 3 and 4 win over 6.
    const std::vector<float> want{0, -4.0f, 0, 2.0f, -2.0f, 0, 0, 0, 0, 0};
    EXPECT_EQ(y, want);
}

TEST(Codec, ErrorFeedbackKeepsTheAccumulatedErrorBounded) {
    // Sending the same x for T steps with feedback, the decoded values sum to T x - e_T, with
    // e_T the last residual: the error does not grow with T.
    for (CodecKind k :
         {CodecKind::kInt4, CodecKind::kTopK, CodecKind::kFp8E5M2, CodecKind::kSign}) {
        auto c = make_codec({k, 64, 0.05});
        const int64_t n = 1001;
        const auto x = values(n, 21);
        std::vector<float> ef(static_cast<size_t>(n), 0.0f);  // the residual, zeros at first
        std::vector<double> sum(static_cast<size_t>(n), 0.0);
        std::vector<uint8_t> bytes(static_cast<size_t>(c->encoded_bytes(n)));
        std::vector<float> dec(static_cast<size_t>(n));
        CompressionStats stats;
        const int T = 200;
        for (int t = 0; t < T; ++t) {
            encode_with_feedback(*c, x.data(), n, bytes.data(), ef.data(), stats);
            c->decode(bytes.data(), n, dec.data());
            for (int64_t i = 0; i < n; ++i)
                sum[static_cast<size_t>(i)] += dec[static_cast<size_t>(i)];
        }
        float xmax = 0;
        for (float v : x) xmax = std::max(xmax, std::fabs(v));
        double worst = 0;
        for (int64_t i = 0; i < n; ++i) {
            const auto u = static_cast<size_t>(i);
            // sum = T x - e exactly in real arithmetic; f32 rounding adds ~T ulps of x.
            EXPECT_NEAR(sum[u], T * static_cast<double>(x[u]) - ef[u], 1e-4 * T * xmax);
            worst = std::max(worst, std::fabs(static_cast<double>(ef[u])));
        }
        // top-k at 5%: a value waits at most ~1/0.05 steps, so |e| stays within ~20 |x| max.
        // onebit: a block's scale is its mean magnitude, so a value 100x its neighbours is sent
        // as a fraction of itself until its residual dominates the block: up to ~block x |x|
        // (5416 seen here against xmax 213, block 64).
        const double bound = k == CodecKind::kSign ? 64.0 * xmax : 25.0 * xmax;
        EXPECT_LT(worst, bound) << codec_kind_name(k);
        EXPECT_GT(stats.error_sq, 0);
        EXPECT_GT(stats.input_sq, stats.error_sq);
    }
}

TEST(Codec, NamesRoundTripAndBadSettingsAreRefused) {
    for (const char* s :
         {"f32", "bf16", "fp16", "int8", "int4", "fp8_e4m3", "fp8_e5m2", "topk", "onebit"})
        EXPECT_STREQ(codec_kind_name(parse_codec_kind(s)), s);
    EXPECT_THROW(parse_codec_kind("int3"), Error);
    EXPECT_THROW(make_codec({CodecKind::kInt8, 0, 0}), Error);
    EXPECT_THROW(make_codec({CodecKind::kSign, 0, 0}), Error);
    EXPECT_THROW(make_codec({CodecKind::kTopK, 1, 0}), Error);
    EXPECT_THROW(make_codec({CodecKind::kTopK, 1, 1.5}), Error);
}

}  // namespace
}  // namespace zt
