#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "tensor/dtype.h"
#include "tensor/memory.h"
#include "tensor/tensor.h"

namespace zt {

namespace {
float from_bits(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
}  // namespace

TEST(DType, Bf16RoundsToNearestEven) {
    // 1 + 2^-8 is exactly halfway between bf16 1.0 and 1 + 2^-7: ties go to even (1.0).
    EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + std::ldexp(1.0f, -8))), 1.0f);
    // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even): goes up.
    EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8))), 1.0f + std::ldexp(1.0f, -6));
    // Just above halfway rounds up.
    EXPECT_EQ(bf16_to_f32(f32_to_bf16(from_bits(0x3f808001u))), from_bits(0x3f810000u));
    EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
    EXPECT_EQ(bf16_to_f32(f32_to_bf16(INFINITY)), INFINITY);
}

TEST(DType, F16RoundTripsAndRounds) {
    for (float v : {0.0f, 1.0f, -2.5f, 65504.0f, 6.103515625e-05f, 5.960464477539063e-08f})
        EXPECT_EQ(f16_to_f32(f32_to_f16(v)), v) << v;
    EXPECT_EQ(f16_to_f32(f32_to_f16(70000.0f)), INFINITY);  // overflow
    // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even (1).
    EXPECT_EQ(f16_to_f32(f32_to_f16(1.0f + std::ldexp(1.0f, -11))), 1.0f);
    EXPECT_EQ(f16_to_f32(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11))), 1.0f + std::ldexp(1.0f, -9));
    // Subnormal halfway: 1.5 * 2^-24 rounds to 2 * 2^-24 (even).
    EXPECT_EQ(f16_to_f32(f32_to_f16(1.5f * std::ldexp(1.0f, -24))), std::ldexp(1.0f, -23));
    EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(NAN))));
}

TEST(DType, VectorConvertMatchesScalarOnOddLengths) {
    const size_t n = 37;  // not a multiple of the 16-lane vector width
    std::vector<float> src(n), back(n);
    std::vector<bf16> dst(n);
    for (size_t i = 0; i < n; ++i) src[i] = std::sin(static_cast<float>(i)) * 1000.0f / (i + 1);
    convert(src.data(), DType::kF32, dst.data(), DType::kBF16, n);
    for (size_t i = 0; i < n; ++i) EXPECT_EQ(dst[i].bits, f32_to_bf16(src[i]).bits);
    convert(dst.data(), DType::kBF16, back.data(), DType::kF32, n);
    for (size_t i = 0; i < n; ++i) EXPECT_EQ(back[i], bf16_to_f32(dst[i]));
}

TEST(DType, VectorF16ConvertMatchesScalarEverywhere) {
    // Every f16 bit pattern to f32 and back (NaN payloads aside), then f32 values around every
    // rounding boundary: halfway points, subnormals, overflow; 65536 + 3 is not a multiple of 16.
    const size_t n = 65536 + 3;
    std::vector<f16> h(n), back(n);
    std::vector<float> f(n);
    for (size_t i = 0; i < n; ++i) h[i] = f16{static_cast<uint16_t>(i & 0xffff)};
    convert(h.data(), DType::kF16, f.data(), DType::kF32, n);
    for (size_t i = 0; i < n; ++i) {
        float want = f16_to_f32(h[i]);
        if (std::isnan(want)) EXPECT_TRUE(std::isnan(f[i]));
        else ASSERT_EQ(f[i], want) << i;
    }
    std::vector<float> probes(n);
    for (size_t i = 0; i < n; ++i) {  // values between neighbouring f16 numbers, and halfway
        float a = f16_to_f32(f16{static_cast<uint16_t>(i & 0x7bff)});
        float b = f16_to_f32(f16{static_cast<uint16_t>((i & 0x7bff) + 1)});
        probes[i] = (i % 3 == 0) ? 0.5f * (a + b) : (i % 3 == 1) ? a + 0.3f * (b - a) : 70000.0f;
    }
    convert(probes.data(), DType::kF32, back.data(), DType::kF16, n);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(back[i].bits, f32_to_f16(probes[i]).bits) << probes[i];
}

TEST(MemoryPool, TracksCategoriesPeaksAndReusesBlocks) {
    MemoryPool pool;
    {
        Tensor a = Tensor::empty(pool, {100}, DType::kF32, MemCategory::kParams);  // 400 -> 448
        Tensor b = Tensor::empty(pool, {10}, DType::kBF16, MemCategory::kActivations);  // 20 -> 64
        MemoryStats s = pool.stats();
        EXPECT_EQ(s.current[0], 448);
        EXPECT_EQ(s.current[static_cast<int>(MemCategory::kActivations)], 64);
        EXPECT_EQ(s.total_current, 512);
    }
    MemoryStats s = pool.stats();
    EXPECT_EQ(s.total_current, 0);
    EXPECT_EQ(s.total_peak, 512);
    EXPECT_EQ(s.system_allocs, 2);
    { Tensor c = Tensor::empty(pool, {100}, DType::kF32, MemCategory::kGrads); }
    EXPECT_EQ(pool.stats().system_allocs, 2) << "a freed block of the same size is reused";
}

TEST(MemoryPool, BudgetOverrunReportsBreakdown) {
    MemoryPool pool;
    pool.set_budget(1024);
    Tensor a = Tensor::empty(pool, {128}, DType::kF32, MemCategory::kParams);
    try {
        Tensor b = Tensor::empty(pool, {256}, DType::kF32, MemCategory::kActivations);
        FAIL() << "expected out of memory";
    } catch (const Error& e) {
        std::string m = e.message();
        EXPECT_NE(m.find("out of memory"), std::string::npos);
        EXPECT_NE(m.find("activations"), std::string::npos);
        EXPECT_NE(m.find("params"), std::string::npos);
    }
}

TEST(Tensor, ViewsShareStorageAndCopyRespectsStrides) {
    MemoryPool pool;
    Tensor t = Tensor::empty(pool, {2, 3}, DType::kF32, MemCategory::kWorkspace);
    float* p = t.data<float>();
    for (int i = 0; i < 6; ++i) p[i] = static_cast<float>(i);
    Tensor tt = t.transpose(0, 1);  // (3, 2)
    EXPECT_FALSE(tt.is_contiguous());
    std::vector<float> v = tt.to_vector();
    EXPECT_EQ(v, (std::vector<float>{0, 3, 1, 4, 2, 5}));
    Tensor s = t.slice(1, 1, 2);  // columns 1..2
    EXPECT_EQ(s.to_vector(), (std::vector<float>{1, 2, 4, 5}));
    Tensor b = tt.to(DType::kBF16, MemCategory::kWorkspace);
    EXPECT_TRUE(b.is_contiguous());
    EXPECT_EQ(b.to_vector(), v);
    Tensor r = t.reshape({3, -1});
    EXPECT_EQ(r.shape(), (Shape{3, 2}));
    r.data<float>()[0] = 42;
    EXPECT_EQ(p[0], 42) << "reshape is a view";
}

}  // namespace zt
