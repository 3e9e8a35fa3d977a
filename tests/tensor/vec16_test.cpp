// The kernels' 16-lane vector (tensor/kernels/vec16.h) on whichever path this build compiled
// (AVX-512, AVX2 halves or plain arrays), against scalar references: bf16 and f16 stores give the
// bits of f32_to_bf16 / f32_to_f16 (ties, NaN, infinities, denormals), partial loads and stores
// touch only their n elements, hsum adds in the documented tree, exp stays within its error bound.
#include "tensor/kernels/vec16.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "util/random.h"

namespace {

using namespace zt;
namespace vec = zt::kernels::vec;
constexpr int64_t kLanes = vec::kLanes;

float from_bits(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

// Values that exercise rounding: ties to even both ways, NaNs with payloads, infinities, signed
// zeros, f32 denormals, f16 overflow and denormal ranges, plus random bit patterns.
std::vector<float> tricky_values() {
    std::vector<float> v = {0.0f,
                            -0.0f,
                            1.0f,
                            -1.0f,
                            65504.0f,
                            65520.0f,
                            1e-8f,
                            6e-5f,
                            3e38f,
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(),
                            from_bits(0x7f800001u),   // signalling NaN
                            from_bits(0x3f808000u),   // bf16 tie, even below: rounds down
                            from_bits(0x3f818000u),   // bf16 tie, odd below: rounds up
                            from_bits(0x00000001u),   // smallest denormal
                            from_bits(0x807fffffu),   // largest negative denormal
                            from_bits(0x7f7fffffu)};  // largest finite: bf16 rounds to inf
    Rng rng(7);
    for (int i = 0; i < 4000; ++i) v.push_back(from_bits(static_cast<uint32_t>(rng.next())));
    while (v.size() % kLanes != 0) v.push_back(0.5f);
    return v;
}

bool same_or_both_nan_bf16(bf16 a, bf16 b) {
    const bool an = (a.bits & 0x7fff) > 0x7f80, bn = (b.bits & 0x7fff) > 0x7f80;
    return an ? bn : a.bits == b.bits;
}

TEST(Vec16, Bf16StoreRoundsLikeScalar) {
    const std::vector<float> x = tricky_values();
    std::vector<bf16> got(x.size());
    for (size_t i = 0; i < x.size(); i += kLanes)
        vec::store(got.data() + i, vec::load(x.data() + i));
    for (size_t i = 0; i < x.size(); ++i) {
        const bf16 want = f32_to_bf16(x[i]);
        // Note [bf16 store]: the AVX512_BF16 instruction flushes f32 denormal inputs to zero.
        const bool denormal = std::fpclassify(x[i]) == FP_SUBNORMAL;
        if (denormal && (got[i].bits & 0x7fff) == 0) continue;
        EXPECT_TRUE(same_or_both_nan_bf16(got[i], want))
            << "x bits " << std::hex << std::bit_cast<uint32_t>(x[i]) << ": got " << got[i].bits
            << ", want " << want.bits;
    }
}

TEST(Vec16, F16StoreRoundsLikeScalar) {
    const std::vector<float> x = tricky_values();
    std::vector<f16> got(x.size());
    for (size_t i = 0; i < x.size(); i += kLanes)
        vec::store(got.data() + i, vec::load(x.data() + i));
    for (size_t i = 0; i < x.size(); ++i) {
        const f16 want = f32_to_f16(x[i]);
        if (std::isnan(x[i])) {  // payload bits may differ (vec16.h)
            EXPECT_GT(got[i].bits & 0x7fff, 0x7c00) << i;
            continue;
        }
        EXPECT_EQ(got[i].bits, want.bits) << "x = " << x[i];
    }
}

TEST(Vec16, HalfLoadsWidenExactly) {
    std::vector<bf16> b(1u << 16);
    std::vector<f16> h(1u << 16);
    for (uint32_t i = 0; i < (1u << 16); ++i) b[i].bits = h[i].bits = static_cast<uint16_t>(i);
    float out[kLanes];
    for (size_t i = 0; i < b.size(); i += kLanes) {
        vec::store(out, vec::load(b.data() + i));
        for (int64_t l = 0; l < kLanes; ++l) {
            const float want = bf16_to_f32(b[i + l]);
            if (std::isnan(want)) {
                EXPECT_TRUE(std::isnan(out[l]));
            } else {
                EXPECT_EQ(std::bit_cast<uint32_t>(out[l]), std::bit_cast<uint32_t>(want));
            }
        }
        vec::store(out, vec::load(h.data() + i));
        for (int64_t l = 0; l < kLanes; ++l) {
            const float want = f16_to_f32(h[i + l]);
            if (std::isnan(want)) {
                EXPECT_TRUE(std::isnan(out[l]));
            } else {
                EXPECT_EQ(std::bit_cast<uint32_t>(out[l]), std::bit_cast<uint32_t>(want));
            }
        }
    }
}

// Every n in 0..16: a partial load reads n values and fills the rest, a partial store writes n
// values and leaves the guard elements after them untouched.
template <typename T>
void check_partial() {
    for (int64_t n = 0; n <= kLanes; ++n) {
        std::vector<T> src(kLanes + 4), dst(kLanes + 4);
        for (int64_t i = 0; i < kLanes + 4; ++i) {
            src[i] = from_f32<T>(static_cast<float>(i + 1));
            dst[i] = from_f32<T>(-7.0f);
        }
        float lanes[kLanes];
        vec::store(lanes, vec::load_part(src.data(), n, 42.0f));
        for (int64_t i = 0; i < kLanes; ++i)
            EXPECT_EQ(lanes[i], i < n ? static_cast<float>(i + 1) : 42.0f) << "n " << n;
        vec::store_part(dst.data(), vec::splat(3.0f), n);
        for (int64_t i = 0; i < kLanes + 4; ++i)
            EXPECT_EQ(to_f32(dst[i]), i < n ? 3.0f : -7.0f) << "n " << n << ", element " << i;
    }
}
TEST(Vec16, PartialLoadsAndStoresTouchOnlyTheirElements) {
    check_partial<float>();
    check_partial<bf16>();
    check_partial<f16>();
}

// hsum adds in a fixed tree: lane i += lane i + 8, then + 4, + 2, + 1.
TEST(Vec16, HsumAddsInTheDocumentedTree) {
    Rng rng(3);
    for (int rep = 0; rep < 200; ++rep) {
        float a[kLanes];
        for (float& e : a)
            e = static_cast<float>(2.0 * rng.uniform() - 1.0) * std::ldexp(1.0f, rep % 40 - 20);
        float t[kLanes];
        std::memcpy(t, a, sizeof t);
        for (int64_t w = kLanes / 2; w > 0; w /= 2)
            for (int64_t i = 0; i < w; ++i) t[i] += t[i + w];
        EXPECT_EQ(std::bit_cast<uint32_t>(vec::hsum(vec::load(a))), std::bit_cast<uint32_t>(t[0]));
        float m = a[0];
        for (float e : a) m = std::max(m, e);
        EXPECT_EQ(vec::hmax(vec::load(a)), m);
    }
}

// Note [vec16 exp]: about 2 ulp over the normal range; 0 below, infinity above, NaN kept.
TEST(Vec16, ExpWithinItsBound) {
    std::vector<float> x;
    for (float v = -104.0f; v <= 88.7f; v += 0.0173f) x.push_back(v);
    while (x.size() % kLanes != 0) x.push_back(0.0f);
    float out[kLanes];
    double worst = 0;
    for (size_t i = 0; i < x.size(); i += kLanes) {
        vec::store(out, vec::exp(vec::load(x.data() + i)));
        for (int64_t l = 0; l < kLanes; ++l) {
            const double want = std::exp(static_cast<double>(x[i + l]));
            if (want < std::numeric_limits<float>::min()) continue;  // denormal results
            worst = std::max(worst, std::abs(out[l] - want) / want);
        }
    }
    EXPECT_LT(worst, 4 * std::numeric_limits<float>::epsilon()) << worst;
    const float inf = std::numeric_limits<float>::infinity();
    float special[kLanes] = {
        -inf, inf, std::numeric_limits<float>::quiet_NaN(), -200.0f, 200.0f, 0.0f, 89.0f, -115.0f};
    vec::store(out, vec::exp(vec::load(special)));
    EXPECT_EQ(out[0], 0.0f);
    EXPECT_EQ(out[1], inf);
    EXPECT_TRUE(std::isnan(out[2]));
    EXPECT_EQ(out[3], 0.0f);
    EXPECT_EQ(out[4], inf);
    EXPECT_EQ(out[5], 1.0f);
    EXPECT_EQ(out[6], inf);  // e^89 = 4.5e38 is past the largest float
    EXPECT_EQ(out[7], 0.0f);
}

}  // namespace
