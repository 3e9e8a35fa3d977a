// Fake quantization against a reference quantizer: int8 as clamp(round-half-even), fp8 e4m3 and
// e5m2 against every value of the format decoded from its bit fields (the nearest one, saturated
// at the largest finite value), per-row scales (max |row| maps to +-qmax), zero rows, clipping,
// and bf16 storage.
#include "tensor/kernels/fake_quant.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "tensor/dtype.h"
#include "util/error.h"

namespace zt {
namespace {

// Every finite non-negative value of an fp8 format, from its bits: exponent field e, mantissa m.
std::vector<float> fp8_values(int exp_bits, int mant_bits, int bias, bool e4m3) {
    std::vector<float> out;
    for (int e = 0; e < (1 << exp_bits); ++e)
        for (int m = 0; m < (1 << mant_bits); ++m) {
            if (e4m3 && e == 15 && m == 7) continue;          // e4m3fn: the NaN code
            if (!e4m3 && e == (1 << exp_bits) - 1) continue;  // e5m2: inf and NaN
            const float frac = static_cast<float>(m) / static_cast<float>(1 << mant_bits);
            out.push_back(e == 0 ? std::ldexp(frac, 1 - bias) : std::ldexp(1.0f + frac, e - bias));
        }
    return out;
}

float nearest(const std::vector<float>& values, float v) {
    float best = values[0];
    for (float x : values)
        if (std::fabs(x - std::fabs(v)) < std::fabs(best - std::fabs(v))) best = x;
    return std::copysign(best, v);
}

TEST(FakeQuant, Int8RoundsHalfToEvenAndSaturates) {
    EXPECT_EQ(quant_round(2.5f, QuantFormat::kInt8), 2.0f);
    EXPECT_EQ(quant_round(3.5f, QuantFormat::kInt8), 4.0f);
    EXPECT_EQ(quant_round(-126.6f, QuantFormat::kInt8), -127.0f);
    EXPECT_EQ(quant_round(300.0f, QuantFormat::kInt8), 127.0f);
    EXPECT_EQ(quant_round(-1e9f, QuantFormat::kInt8), -127.0f);
}

TEST(FakeQuant, Fp8IsTheNearestValueOfTheFormat) {
    struct Fmt {
        QuantFormat f;
        std::vector<float> values;
        float max;
    };
    const std::vector<Fmt> fmts = {{QuantFormat::kFp8E4M3, fp8_values(4, 3, 7, true), 448.0f},
                                   {QuantFormat::kFp8E5M2, fp8_values(5, 2, 15, false), 57344.0f}};
    std::mt19937 rng(3);
    for (const Fmt& f : fmts) {
        EXPECT_EQ(*std::max_element(f.values.begin(), f.values.end()), f.max);
        EXPECT_EQ(quant_format_max(f.f), f.max);
        // Every representable value maps to itself, with either sign.
        for (float x : f.values) {
            EXPECT_EQ(quant_round(x, f.f), x);
            EXPECT_EQ(quant_round(-x, f.f), -x);
        }
        // Random magnitudes over the whole range, subnormals included.
        std::uniform_real_distribution<float> lg(-20.0f, std::log2(f.max) + 1.0f);
        for (int i = 0; i < 20000; ++i) {
            const float v = (i % 2 ? -1.0f : 1.0f) * std::exp2(lg(rng));
            const float want =
                std::fabs(v) >= f.max ? std::copysign(f.max, v) : nearest(f.values, v);
            const float got = quant_round(v, f.f);
            // A tie between two neighbours may go either way in nearest(): check the distance.
            EXPECT_EQ(std::fabs(got - v), std::fabs(want - v))
                << quant_format_name(f.f) << " " << v;
        }
    }
}

TEST(FakeQuant, RowsGetTheirOwnScale) {
    const int64_t R = 3, K = 7;
    std::vector<float> x = {0.5f,  -2.0f,  1.0f,  0.25f, 0.1f, -0.3f, 1.9f,     // max 2
                            0.0f,  0.0f,   0.0f,  0.0f,  0.0f, 0.0f,  0.0f,     // zeros
                            3e-3f, -1e-3f, 2e-3f, 7e-4f, 0.0f, 5e-4f, -6e-3f};  // max 6e-3
    for (QuantFormat f : {QuantFormat::kInt8, QuantFormat::kFp8E4M3, QuantFormat::kFp8E5M2}) {
        std::vector<float> y(x.size()), s(R);
        kernels::fake_quant_rows(x.data(), y.data(), s.data(), R, K, f, 1.0f);
        const float qmax = quant_format_max(f);
        EXPECT_FLOAT_EQ(s[0], 2.0f / qmax);
        EXPECT_EQ(s[1], 0.0f);
        EXPECT_FLOAT_EQ(s[2], 6e-3f / qmax);
        for (int64_t r = 0; r < R; ++r)
            for (int64_t k = 0; k < K; ++k) {
                const size_t i = static_cast<size_t>(r * K + k);
                const float want = s[r] == 0 ? 0.0f : quant_round(x[i] / s[r], f) * s[r];
                EXPECT_EQ(y[i], want) << quant_format_name(f) << " " << r << "," << k;
            }
        EXPECT_FLOAT_EQ(y[1], -2.0f);  // the row's max maps to -qmax s exactly
        // bf16 storage: the same values rounded to bf16.
        std::vector<bf16> xb(x.size()), yb(x.size());
        for (size_t i = 0; i < x.size(); ++i) xb[i] = f32_to_bf16(x[i]);
        kernels::fake_quant_rows(xb.data(), yb.data(), s.data(), R, K, f, 1.0f);
        for (size_t i = 0; i < x.size(); ++i) {
            const float xi = bf16_to_f32(xb[i]);
            const int64_t r = static_cast<int64_t>(i) / K;
            const float want = s[r] == 0 ? 0.0f : quant_round(xi / s[r], f) * s[r];
            EXPECT_EQ(bf16_to_f32(yb[i]), bf16_to_f32(f32_to_bf16(want))) << i;
        }
    }
}

TEST(FakeQuant, ClipSaturatesTheLargest) {
    const std::vector<float> x = {1.0f, -0.5f, 0.25f, 0.9f};
    std::vector<float> y(4), s(1);
    kernels::fake_quant_rows(x.data(), y.data(), s.data(), 1, 4, QuantFormat::kInt8, 0.5f);
    EXPECT_FLOAT_EQ(s[0], 0.5f / 127.0f);
    EXPECT_FLOAT_EQ(y[0], 0.5f);   // clipped to 127 s
    EXPECT_FLOAT_EQ(y[1], -0.5f);  // at the limit
    EXPECT_FLOAT_EQ(y[3], 0.5f);   // clipped
    EXPECT_FLOAT_EQ(y[2], quant_round(0.25f / s[0], QuantFormat::kInt8) * s[0]);
}

// Storage codes: every code of each format decodes to the value its bit fields give, and
// encodes back to itself (int8: all 256; fp8: all but NaN and, in e5m2, the infinities).
TEST(FakeQuant, CodesRoundTripThroughTheirBitFields) {
    for (int c = 0; c < 256; ++c)
        EXPECT_EQ(quant_encode(quant_decode(static_cast<uint8_t>(c), QuantFormat::kInt8),
                               QuantFormat::kInt8),
                  c);
    struct Fmt {
        QuantFormat f;
        int mant, bias;
    };
    for (const Fmt& f : {Fmt{QuantFormat::kFp8E4M3, 3, 7}, Fmt{QuantFormat::kFp8E5M2, 2, 15}}) {
        const int exp_bits = 7 - f.mant;
        for (int c = 0; c < 256; ++c) {
            const int field = (c & 0x7f) >> f.mant, m = c & ((1 << f.mant) - 1);
            if (f.f == QuantFormat::kFp8E4M3 && (c & 0x7f) == 0x7f) continue;  // NaN
            if (f.f == QuantFormat::kFp8E5M2 && field == (1 << exp_bits) - 1) continue;
            const float frac = static_cast<float>(m) / static_cast<float>(1 << f.mant);
            float want =
                field == 0 ? std::ldexp(frac, 1 - f.bias) : std::ldexp(1.0f + frac, field - f.bias);
            if (c & 0x80) want = -want;
            const float v = quant_decode(static_cast<uint8_t>(c), f.f);
            EXPECT_EQ(v, want) << quant_format_name(f.f) << " code " << c;
            EXPECT_EQ(quant_encode(v, f.f), c) << quant_format_name(f.f) << " code " << c;
            EXPECT_EQ(quant_round(v, f.f), v);
        }
    }
}

TEST(FakeQuant, FormatNames) {
    for (const char* n : {"int8", "fp8_e4m3", "fp8_e5m2"})
        EXPECT_STREQ(quant_format_name(parse_quant_format(n)), n);
    EXPECT_THROW(parse_quant_format("int4"), Error);
}

}  // namespace
}  // namespace zt
