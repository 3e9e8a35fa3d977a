// The peak loops (tensor/peak_kernels.h). Every SIMD flavour is compiled with a target attribute,
// whatever -march says, and chosen at run time by __builtin_cpu_supports, so one binary measures
// what the running CPU has. The loops are noinline and write their accumulators to memory: their
// result depends on every instruction, so no optimizer can shorten them.
#include "tensor/peak_kernels.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>

#include "tensor/dtype.h"
#include "util/error.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define ZT_PEAK_X86 1
#endif

namespace zt::peak {

// Note [Accumulator counts]
// An FMA (and vdpbf16ps) has a latency of 4-6 cycles and the CPUs we meet issue two per cycle, so a
// loop needs at least 8-12 independent dependency chains to keep both pipes busy. AVX-512 has 32
// registers: 16 accumulators plus the two operands fit. AVX2 has 16: 12 accumulators plus two
// operands. AMX keeps four accumulator tiles (2 x 2 over two A and two B tiles), as oneDNN's
// kernels do; a tdpbf16ps occupies its unit for 16 cycles, which hides the tile latency.
constexpr int kAcc512 = 16;
constexpr int kAcc256 = 12;
constexpr int kAccScalar = 8;
constexpr int kAmxAcc = 4;
constexpr double kAmxFlopsPerOp = 2.0 * 16 * 16 * 32;  // 16x16 outputs, K = 32 bf16 each
constexpr double kDotFlopsPerOp = 2.0 * 16 * 2;        // 16 fp32 lanes, 2 bf16 pairs each

namespace {

template <int N>
double add_up(const float (&v)[N]) {
    double s = 0;
    for (float x : v) s += x;
    return s;
}

__attribute__((noinline)) LoopResult fma_scalar(int64_t iters, float a, float b) {
    float acc[kAccScalar] = {};
    for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 8
        for (float& x : acc) x = x * a + b;
    }
    return {2.0 * kAccScalar * static_cast<double>(iters), add_up(acc)};
}

#ifdef ZT_PEAK_X86
__attribute__((target("avx2,fma"), noinline)) LoopResult fma_avx2(int64_t iters, float a,
                                                                  float b) {
    const __m256 va = _mm256_set1_ps(a), vb = _mm256_set1_ps(b);
    __m256 acc[kAcc256];
    for (__m256& x : acc) x = _mm256_setzero_ps();
    for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 12
        for (__m256& x : acc) x = _mm256_fmadd_ps(x, va, vb);
    }
    float out[8 * kAcc256];
    for (int k = 0; k < kAcc256; ++k) _mm256_storeu_ps(out + 8 * k, acc[k]);
    return {2.0 * 8 * kAcc256 * static_cast<double>(iters), add_up(out)};
}

__attribute__((target("avx512f"), noinline)) LoopResult fma_avx512(int64_t iters, float a,
                                                                   float b) {
    const __m512 va = _mm512_set1_ps(a), vb = _mm512_set1_ps(b);
    __m512 acc[kAcc512];
    for (__m512& x : acc) x = _mm512_setzero_ps();
    for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 16
        for (__m512& x : acc) x = _mm512_fmadd_ps(x, va, vb);
    }
    float out[16 * kAcc512];
    for (int k = 0; k < kAcc512; ++k) _mm512_storeu_ps(out + 16 * k, acc[k]);
    return {2.0 * 16 * kAcc512 * static_cast<double>(iters), add_up(out)};
}

__attribute__((target("avx512f,avx512bf16"), noinline)) LoopResult dot_bf16(int64_t iters,
                                                                             float a, float b) {
    const __m512 fa = _mm512_set1_ps(a), fb = _mm512_set1_ps(b);
    const __m512bh va = _mm512_cvtne2ps_pbh(fa, fa), vb = _mm512_cvtne2ps_pbh(fb, fb);
    __m512 acc[kAcc512];
    for (__m512& x : acc) x = _mm512_setzero_ps();
    for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 16
        for (__m512& x : acc) x = _mm512_dpbf16_ps(x, va, vb);
    }
    float out[16 * kAcc512];
    for (int k = 0; k < kAcc512; ++k) _mm512_storeu_ps(out + 16 * k, acc[k]);
    return {kDotFlopsPerOp * kAcc512 * static_cast<double>(iters), add_up(out)};
}

// The 64-byte AMX tile configuration (palette 1): eight tiles of 16 rows x 64 bytes.
struct alignas(64) TileConfig {
    uint8_t palette = 1;
    uint8_t start_row = 0;
    uint8_t reserved[14] = {};
    uint16_t colsb[16] = {};
    uint8_t rows[16] = {};
};

// Tiles 0-3 accumulate (fp32 16x16), 4-5 hold A (bf16 16x32), 6-7 hold B (bf16 pairs 16x16x2).
__attribute__((target("amx-tile,amx-bf16"), noinline)) LoopResult tile_bf16(int64_t iters,
                                                                             float a, float b) {
    TileConfig cfg;
    for (int t = 0; t < 8; ++t) {
        cfg.colsb[t] = 64;
        cfg.rows[t] = 16;
    }
    alignas(64) uint16_t ta[16 * 32], tb[16 * 32];
    for (int i = 0; i < 16 * 32; ++i) {
        ta[i] = f32_to_bf16(a).bits;
        tb[i] = f32_to_bf16(b).bits;
    }
    _tile_loadconfig(&cfg);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_loadd(4, ta, 64);
    _tile_loadd(5, ta, 64);
    _tile_loadd(6, tb, 64);
    _tile_loadd(7, tb, 64);
    for (int64_t i = 0; i < iters; ++i) {
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    alignas(64) float out[kAmxAcc * 16 * 16];
    _tile_stored(0, out + 0 * 256, 64);
    _tile_stored(1, out + 1 * 256, 64);
    _tile_stored(2, out + 2 * 256, 64);
    _tile_stored(3, out + 3 * 256, 64);
    _tile_release();  // back to the init state: cheaper context switches
    return {kAmxFlopsPerOp * kAmxAcc * static_cast<double>(iters), add_up(out)};
}

__attribute__((target("avx512f"), noinline)) double read_avx512(const float* p, size_t n) {
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        s0 = _mm512_add_ps(s0, _mm512_loadu_ps(p + i));
        s1 = _mm512_add_ps(s1, _mm512_loadu_ps(p + i + 16));
        s2 = _mm512_add_ps(s2, _mm512_loadu_ps(p + i + 32));
        s3 = _mm512_add_ps(s3, _mm512_loadu_ps(p + i + 48));
    }
    float out[64];
    _mm512_storeu_ps(out, s0);
    _mm512_storeu_ps(out + 16, s1);
    _mm512_storeu_ps(out + 32, s2);
    _mm512_storeu_ps(out + 48, s3);
    double s = add_up(out);
    for (; i < n; ++i) s += p[i];
    return s;
}
#endif  // ZT_PEAK_X86

__attribute__((noinline)) double read_scalar(const float* p, size_t n) {
    float acc[kAccScalar] = {};
    size_t i = 0;
    for (; i + kAccScalar <= n; i += kAccScalar)
        for (int k = 0; k < kAccScalar; ++k) acc[k] += p[i + k];
    double s = add_up(acc);
    for (; i < n; ++i) s += p[i];
    return s;
}

}  // namespace

const char* f32_isa_name(F32Isa isa) {
    switch (isa) {
        case F32Isa::kScalar: return "scalar";
        case F32Isa::kAvx2Fma: return "avx2+fma";
        case F32Isa::kAvx512: return "avx512f";
    }
    return "?";
}

bool f32_isa_supported(F32Isa isa) {
#ifdef ZT_PEAK_X86
    if (isa == F32Isa::kAvx512) return __builtin_cpu_supports("avx512f");
    if (isa == F32Isa::kAvx2Fma) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
    return isa == F32Isa::kScalar;
}

F32Isa f32_isa_best() {
    for (F32Isa isa : {F32Isa::kAvx512, F32Isa::kAvx2Fma})
        if (f32_isa_supported(isa)) return isa;
    return F32Isa::kScalar;
}

LoopResult f32_fma_loop(F32Isa isa, int64_t iters, float a, float b) {
    ZT_CHECK(f32_isa_supported(isa), "peak: ", f32_isa_name(isa),
             " is not available on this CPU; use f32_isa_best()");
#ifdef ZT_PEAK_X86
    if (isa == F32Isa::kAvx512) return fma_avx512(iters, a, b);
    if (isa == F32Isa::kAvx2Fma) return fma_avx2(iters, a, b);
#endif
    return fma_scalar(iters, a, b);
}

bool bf16_dot_supported() {
#ifdef ZT_PEAK_X86
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16");
#else
    return false;
#endif
}

LoopResult bf16_dot_loop(int64_t iters, float a, float b) {
    ZT_CHECK(bf16_dot_supported(), "peak: this CPU lacks AVX512_BF16 (vdpbf16ps)");
#ifdef ZT_PEAK_X86
    return dot_bf16(iters, a, b);
#else
    (void)iters, (void)a, (void)b;
    return {};
#endif
}

AmxState amx_state() {
#ifdef ZT_PEAK_X86
    // Linux keeps AMX tile data off until a process asks (arch/x86 XFEATURE_XTILEDATA = 18).
    constexpr int kArchReqXcompPerm = 0x1023;
    constexpr int kXfeatureXtiledata = 18;
    static const AmxState state = [] {
        if (!__builtin_cpu_supports("amx-tile") || !__builtin_cpu_supports("amx-bf16"))
            return AmxState::kAbsent;
        return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0
                   ? AmxState::kReady
                   : AmxState::kDenied;
    }();
    return state;
#else
    return AmxState::kAbsent;
#endif
}

LoopResult amx_bf16_loop(int64_t iters, float a, float b) {
    ZT_CHECK(amx_state() == AmxState::kReady,
             "peak: AMX bf16 is not usable here (absent, or the OS refused tile data)");
#ifdef ZT_PEAK_X86
    return tile_bf16(iters, a, b);
#else
    (void)iters, (void)a, (void)b;
    return {};
#endif
}

LoopResult mem_read(const float* p, size_t n) {
    const double bytes = static_cast<double>(n) * sizeof(float);
#ifdef ZT_PEAK_X86
    if (__builtin_cpu_supports("avx512f")) return {bytes, read_avx512(p, n)};
#endif
    return {bytes, read_scalar(p, n)};
}

}  // namespace zt::peak
