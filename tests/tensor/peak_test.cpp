// The peak loops' FLOP accounting against what the hardware computed (with a = b = 1 every lane
// counts its multiply-adds, so the accumulators add up to flops / 2), the memory kernel's sum and
// byte count, the buffer sizing, and that measure_compute_peak measures exactly the ISAs present.
// No verdict depends on the CPU model or on a timing.
#include "tensor/peak.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tensor/peak_kernels.h"
#include "util/error.h"

namespace zt {
namespace {

using peak::F32Isa;

// Iteration counts that do not divide any unroll or SIMD width; small enough that every
// accumulator stays an exact integer in fp32 (below 2^24).
const int64_t kIters[] = {1, 7, 1001};

TEST(PeakKernels, F32FmaFlopsMatchTheFmasDone) {
    int tested = 0;
    for (F32Isa isa : {F32Isa::kScalar, F32Isa::kAvx2Fma, F32Isa::kAvx512}) {
        if (!peak::f32_isa_supported(isa)) continue;
        ++tested;
        const int lanes = isa == F32Isa::kAvx512 ? 16 * 16 : isa == F32Isa::kAvx2Fma ? 8 * 12 : 8;
        for (int64_t n : kIters) {
            const peak::LoopResult r = peak::f32_fma_loop(isa, n, 1.0f, 1.0f);
            EXPECT_EQ(r.flops, 2.0 * lanes * n) << peak::f32_isa_name(isa) << " iters " << n;
            EXPECT_EQ(r.sum, r.flops / 2) << peak::f32_isa_name(isa) << " iters " << n;
        }
        // acc = acc * 0.5 + 1 converges to 2 on every lane: the multiplier is really applied.
        const peak::LoopResult half = peak::f32_fma_loop(isa, 64, 0.5f, 1.0f);
        EXPECT_NEAR(half.sum, 2.0 * lanes, 1e-3) << peak::f32_isa_name(isa);
    }
    EXPECT_GE(tested, 1);  // scalar always
    EXPECT_TRUE(peak::f32_isa_supported(peak::f32_isa_best()));
}

TEST(PeakKernels, Bf16DotFlopsMatchTheProductsDone) {
    if (!peak::bf16_dot_supported()) {
        EXPECT_THROW(peak::bf16_dot_loop(1, 1.0f, 1.0f), Error);
        GTEST_SKIP() << "no AVX512_BF16 here";
    }
    for (int64_t n : kIters) {
        const peak::LoopResult r = peak::bf16_dot_loop(n, 1.0f, 1.0f);
        EXPECT_EQ(r.flops, 64.0 * 16 * n) << "iters " << n;  // 16 accumulators, 64 FLOP each
        EXPECT_EQ(r.sum, r.flops / 2) << "iters " << n;
    }
    // The operands are really multiplied: 3 x 0.5 per product, 2 products per lane.
    EXPECT_EQ(peak::bf16_dot_loop(1, 3.0f, 0.5f).sum, 16 * 16 * 2 * 1.5);
}

TEST(PeakKernels, AmxFlopsMatchTheTileProductsDone) {
    if (peak::amx_state() != peak::AmxState::kReady) {
        EXPECT_THROW(peak::amx_bf16_loop(1, 1.0f, 1.0f), Error);
        GTEST_SKIP() << "AMX absent or refused by the OS";
    }
    for (int64_t n : kIters) {
        const peak::LoopResult r = peak::amx_bf16_loop(n, 1.0f, 1.0f);
        EXPECT_EQ(r.flops, 16384.0 * 4 * n) << "iters " << n;  // four 16x16x32 tiles
        EXPECT_EQ(r.sum, r.flops / 2) << "iters " << n;
    }
}

TEST(PeakKernels, MemReadAddsUpEveryElementAndCountsItsBytes) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{63}, size_t{64}, size_t{1000003}}) {
        std::vector<float> v(n + 1);
        double want = 0;
        for (size_t i = 0; i < v.size(); ++i) {
            v[i] = static_cast<float>(i % 7);
            if (i >= 1) want += v[i];
        }
        // From element 1: a start off the 64-byte line.
        const peak::LoopResult r = peak::mem_read(v.data() + 1, n);
        EXPECT_EQ(r.flops, 4.0 * n) << n;
        EXPECT_EQ(r.sum, want) << n;
    }
}

TEST(PeakBuffer, FourTimesL3AtLeastOneGibAtMostAQuarterOfMemory) {
    const size_t gib = size_t{1} << 30, mib = size_t{1} << 20;
    EXPECT_EQ(peak_mem_buffer_bytes(480 * mib, 64 * gib), 4 * 480 * mib);
    EXPECT_EQ(peak_mem_buffer_bytes(32 * mib, 64 * gib), gib);     // the floor
    EXPECT_EQ(peak_mem_buffer_bytes(480 * mib, 4 * gib), gib);     // the cap
    EXPECT_EQ(peak_mem_buffer_bytes(0, 0), gib);                   // nothing known
    EXPECT_EQ(peak_mem_buffer_bytes(0, 2 * gib + 4096), gib / 2);  // cap under the floor
    EXPECT_EQ(peak_mem_buffer_bytes() % 4096, 0u);
    EXPECT_GT(peak_mem_buffer_bytes(), 0u);
}

TEST(PeakBuffer, ParsesSysfsCacheSizes) {
    EXPECT_EQ(parse_cache_size("491520K"), size_t{491520} << 10);
    EXPECT_EQ(parse_cache_size("32M"), size_t{32} << 20);
    EXPECT_EQ(parse_cache_size("1G"), size_t{1} << 30);
    EXPECT_EQ(parse_cache_size("1024"), 1024u);
    EXPECT_EQ(parse_cache_size(""), 0u);
    EXPECT_EQ(parse_cache_size("big"), 0u);
    EXPECT_EQ(parse_cache_size("12Q"), 0u);
}

TEST(Peak, MeasuresTheIsasPresentAndOnlyThose) {
    const PeakRates r = measure_compute_peak(1, 0.005);
    EXPECT_EQ(r.threads, 1);
    EXPECT_TRUE(std::isfinite(r.f32_fma_flops));
    EXPECT_GT(r.f32_fma_flops, 0);
    EXPECT_NE(r.isa.find(peak::f32_isa_name(peak::f32_isa_best())), std::string::npos) << r.isa;
    if (peak::bf16_dot_supported()) {
        EXPECT_GT(r.bf16_dot_flops, 0);
        EXPECT_NE(r.isa.find("avx512_bf16"), std::string::npos) << r.isa;
    } else {
        EXPECT_EQ(r.bf16_dot_flops, 0);
    }
    if (peak::amx_state() == peak::AmxState::kReady) {
        EXPECT_GT(r.amx_bf16_flops, 0);
        EXPECT_NE(r.isa.find("+amx_bf16"), std::string::npos) << r.isa;
    } else {
        EXPECT_EQ(r.amx_bf16_flops, 0);
    }
    EXPECT_EQ(r.bf16_flops(), std::max(r.bf16_dot_flops, r.amx_bf16_flops));
    EXPECT_EQ(r.mem_read_bytes_per_s, 0);  // compute only
}

TEST(Peak, RejectsBadArguments) {
    EXPECT_THROW(measure_compute_peak(0, 0.01), Error);
    EXPECT_THROW(measure_compute_peak(1, 0), Error);
    EXPECT_THROW(measure_peak(1, -1), Error);
}

}  // namespace
}  // namespace zt
