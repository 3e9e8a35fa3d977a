#include "tensor/dtype.h"

#include <immintrin.h>

#include "tensor/kernels/vec16.h"
#include "util/error.h"

namespace zt {

size_t dtype_size(DType dtype) { return dtype == DType::kF32 ? 4 : 2; }

const char* dtype_name(DType dtype) {
    switch (dtype) {
        case DType::kF32: return "f32";
        case DType::kBF16: return "bf16";
        case DType::kF16: return "f16";
    }
    return "?";
}

DType parse_dtype(const std::string& name) {
    if (name == "f32" || name == "fp32" || name == "float32" || name == "float") return DType::kF32;
    if (name == "bf16" || name == "bfloat16") return DType::kBF16;
    if (name == "f16" || name == "fp16" || name == "float16" || name == "half") return DType::kF16;
    ZT_FAIL("unknown dtype \"", name, "\"; expected one of fp32, bf16, fp16");
}

// IEEE binary16 <-> binary32 in software (round to nearest even), so results do not depend on F16C.
float f16_to_f32(f16 h) {
    uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000u) << 16;
    uint32_t exp = (h.bits >> 10) & 0x1fu;
    uint32_t mant = h.bits & 0x3ffu;
    uint32_t u;
    if (exp == 0) {
        if (mant == 0) {
            u = sign;
        } else {  // subnormal: normalize
            int e = -1;
            do {
                ++e;
                mant <<= 1;
            } while ((mant & 0x400u) == 0);
            u = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (mant & 0x3ffu) << 13;
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | mant << 13;
    } else {
        u = sign | (exp + 112) << 23 | mant << 13;
    }
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

f16 f32_to_f16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
    uint32_t abs = u & 0x7fffffffu;
    if (abs > 0x7f800000u) return f16{static_cast<uint16_t>(sign | 0x7e00u)};  // NaN
    if (abs >= 0x477ff000u) return f16{static_cast<uint16_t>(sign | 0x7c00u)};  // overflow -> inf
    if (abs < 0x38800000u) {  // result is subnormal or zero in f16
        float af;
        std::memcpy(&af, &abs, 4);
        // Scale so the f16 subnormal unit (2^-24) becomes 1, then round to nearest even.
        float scaled = af * 16777216.0f;
        uint32_t m = static_cast<uint32_t>(scaled);
        float rem = scaled - static_cast<float>(m);
        if (rem > 0.5f || (rem == 0.5f && (m & 1u))) ++m;
        return f16{static_cast<uint16_t>(sign | m)};
    }
    uint32_t exp = (abs >> 23) - 112;
    uint32_t mant = abs & 0x7fffffu;
    uint32_t h = exp << 10 | mant >> 13;
    uint32_t rest = mant & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // may carry into the exponent
    return f16{static_cast<uint16_t>(sign | h)};
}

namespace {

void f32_to_bf16_n(const float* src, bf16* dst, size_t n) {
    size_t i = 0;
#if defined(__AVX512F__) && defined(__AVX512BW__)
    const __m512i bias = _mm512_set1_epi32(0x7fff);
    const __m512i one = _mm512_set1_epi32(1);
    for (; i + 16 <= n; i += 16) {
        __m512i u = _mm512_loadu_si512(src + i);
        __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), one);
        __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(bias, lsb)), 16);
        // NaN inputs keep a quiet NaN pattern.
        __mmask16 nan = _mm512_cmp_ps_mask(_mm512_castsi512_ps(u), _mm512_castsi512_ps(u),
                                           _CMP_UNORD_Q);
        r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(_mm512_srli_epi32(u, 16),
                                                          _mm512_set1_epi32(0x40)));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm512_cvtepi32_epi16(r));
    }
#elif defined(ZT_VEC16_AVX2)  // the same rounding on two AVX2 halves (vec16_avx2.h)
    for (; i + 16 <= n; i += 16) kernels::vec::store(dst + i, kernels::vec::load(src + i));
#endif
    for (; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
}

void bf16_to_f32_n(const bf16* src, float* dst, size_t n) {
    size_t i = 0;
#if defined(__AVX512F__)
    for (; i + 16 <= n; i += 16) {
        __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
        __m512i u = _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16);
        _mm512_storeu_si512(dst + i, u);
    }
#elif defined(ZT_VEC16_AVX2)
    for (; i + 16 <= n; i += 16) kernels::vec::store(dst + i, kernels::vec::load(src + i));
#endif
    for (; i < n; ++i) dst[i] = bf16_to_f32(src[i]);
}

void f32_to_f16_n(const float* src, f16* dst, size_t n) {
    size_t i = 0;
#if defined(__AVX512F__)
    for (; i + 16 <= n; i += 16) {
        __m256i h = _mm512_cvtps_ph(_mm512_loadu_ps(src + i),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), h);
    }
#elif defined(ZT_VEC16_AVX2)  // F16C, round to nearest even
    for (; i + 16 <= n; i += 16) kernels::vec::store(dst + i, kernels::vec::load(src + i));
#endif
    for (; i < n; ++i) dst[i] = f32_to_f16(src[i]);
}

void f16_to_f32_n(const f16* src, float* dst, size_t n) {
    size_t i = 0;
#if defined(__AVX512F__)
    for (; i + 16 <= n; i += 16) {
        __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
        _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(h));
    }
#elif defined(ZT_VEC16_AVX2)
    for (; i + 16 <= n; i += 16) kernels::vec::store(dst + i, kernels::vec::load(src + i));
#endif
    for (; i < n; ++i) dst[i] = f16_to_f32(src[i]);
}

float load(const void* p, DType t, size_t i) {
    switch (t) {
        case DType::kF32: return static_cast<const float*>(p)[i];
        case DType::kBF16: return bf16_to_f32(static_cast<const bf16*>(p)[i]);
        case DType::kF16: return f16_to_f32(static_cast<const f16*>(p)[i]);
    }
    return 0;
}

void store(void* p, DType t, size_t i, float v) {
    switch (t) {
        case DType::kF32: static_cast<float*>(p)[i] = v; break;
        case DType::kBF16: static_cast<bf16*>(p)[i] = f32_to_bf16(v); break;
        case DType::kF16: static_cast<f16*>(p)[i] = f32_to_f16(v); break;
    }
}

}  // namespace

void convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, size_t n) {
    if (n == 0) return;  // the pointers may be null (an empty vector's data())
    if (src_dtype == dst_dtype) {
        std::memmove(dst, src, n * dtype_size(src_dtype));
    } else if (src_dtype == DType::kF32 && dst_dtype == DType::kBF16) {
        f32_to_bf16_n(static_cast<const float*>(src), static_cast<bf16*>(dst), n);
    } else if (src_dtype == DType::kBF16 && dst_dtype == DType::kF32) {
        bf16_to_f32_n(static_cast<const bf16*>(src), static_cast<float*>(dst), n);
    } else if (src_dtype == DType::kF32 && dst_dtype == DType::kF16) {
        f32_to_f16_n(static_cast<const float*>(src), static_cast<f16*>(dst), n);
    } else if (src_dtype == DType::kF16 && dst_dtype == DType::kF32) {
        f16_to_f32_n(static_cast<const f16*>(src), static_cast<float*>(dst), n);
    } else {
        for (size_t i = 0; i < n; ++i) store(dst, dst_dtype, i, load(src, src_dtype, i));
    }
}

}  // namespace zt
