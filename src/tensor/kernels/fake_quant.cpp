#include "tensor/kernels/fake_quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "tensor/dtype.h"
#include "util/error.h"

namespace zt {

QuantFormat parse_quant_format(const std::string& name) {
    if (name == "int8") return QuantFormat::kInt8;
    if (name == "fp8_e4m3") return QuantFormat::kFp8E4M3;
    if (name == "fp8_e5m2") return QuantFormat::kFp8E5M2;
    ZT_FAIL("quantization format: expected \"int8\", \"fp8_e4m3\" or \"fp8_e5m2\", got \"", name,
            "\"");
}

const char* quant_format_name(QuantFormat f) {
    switch (f) {
        case QuantFormat::kInt8:
            return "int8";
        case QuantFormat::kFp8E4M3:
            return "fp8_e4m3";
        case QuantFormat::kFp8E5M2:
            return "fp8_e5m2";
    }
    return "?";
}

float quant_format_max(QuantFormat f) {
    switch (f) {
        case QuantFormat::kInt8:
            return 127.0f;
        case QuantFormat::kFp8E4M3:
            return 448.0f;
        case QuantFormat::kFp8E5M2:
            return 57344.0f;
    }
    return 0.0f;
}

float quant_round(float v, QuantFormat f) {
    const float qmax = quant_format_max(f);
    if (f == QuantFormat::kInt8) return std::clamp(std::nearbyint(v), -qmax, qmax);
    // A float format with `mant` mantissa bits: in the normal range, round the f32 mantissa to
    // `mant` bits, to nearest even, on the bits (a carry into the exponent is the next binade);
    // below the smallest normal 2^emin the spacing is the subnormals' 2^(emin - mant).
    const int mant = f == QuantFormat::kFp8E4M3 ? 3 : 2;
    const int emin = f == QuantFormat::kFp8E4M3 ? -6 : -14;
    const float a = std::fabs(v);
    if (!(a < qmax)) return std::isnan(v) ? v : std::copysign(qmax, v);
    float q;
    if (a < std::ldexp(1.0f, emin)) {
        const float inv_step = std::ldexp(1.0f, mant - emin);
        q = std::nearbyint(a * inv_step) / inv_step;
    } else {
        uint32_t u;
        std::memcpy(&u, &a, 4);
        const int drop = 23 - mant;
        u += ((uint32_t{1} << (drop - 1)) - 1) + ((u >> drop) & 1);
        u &= ~((uint32_t{1} << drop) - 1);
        std::memcpy(&q, &u, 4);
    }
    return std::copysign(std::min(q, qmax), v);
}

namespace {

struct Fp8Bits {
    int mant, bias;
};

Fp8Bits fp8_bits(QuantFormat f) {
    return f == QuantFormat::kFp8E4M3 ? Fp8Bits{3, 7} : Fp8Bits{2, 15};
}

}  // namespace

uint8_t quant_encode(float v, QuantFormat f) {
    if (f == QuantFormat::kInt8) return static_cast<uint8_t>(static_cast<int8_t>(v));
    const Fp8Bits b = fp8_bits(f);
    const uint8_t sign = std::signbit(v) ? 0x80 : 0x00;
    const float a = std::fabs(v);
    if (a == 0.0f) return sign;
    int e = 0;
    std::frexp(a, &e);
    int field = e - 1 + b.bias;  // biased exponent of a normal value
    int mant = 0;
    if (field <= 0) {  // subnormal: a = mant 2^(1 - bias - mant bits)
        field = 0;
        mant = static_cast<int>(std::ldexp(a, b.mant + b.bias - 1));
    } else {
        mant = static_cast<int>(std::ldexp(a, b.mant - (e - 1))) - (1 << b.mant);
    }
    return static_cast<uint8_t>(sign | (field << b.mant) | mant);
}

float quant_decode(uint8_t code, QuantFormat f) {
    if (f == QuantFormat::kInt8) return static_cast<float>(static_cast<int8_t>(code));
    const Fp8Bits b = fp8_bits(f);
    const int field = (code & 0x7f) >> b.mant;
    const int mant = code & ((1 << b.mant) - 1);
    const float a =
        field == 0 ? std::ldexp(static_cast<float>(mant), 1 - b.bias - b.mant)
                   : std::ldexp(static_cast<float>((1 << b.mant) + mant), field - b.bias - b.mant);
    return code & 0x80 ? -a : a;
}

namespace kernels {

template <typename T>
void row_absmax(const T* x, int64_t rows, int64_t cols, float* out) {
    for (int64_t r = 0; r < rows; ++r) {
        const T* xr = x + r * cols;
        float amax = 0.0f;
        for (int64_t c = 0; c < cols; ++c) amax = std::max(amax, std::fabs(to_f32(xr[c])));
        out[r] = amax;
    }
}

template <typename T>
void fake_quant_rows(const T* x, T* y, float* scales, int64_t rows, int64_t cols, QuantFormat f,
                     float clip, float* ranges, const float* row_max) {
    const float qmax = quant_format_max(f);
    for (int64_t r = 0; r < rows; ++r) {
        const T* xr = x + r * cols;
        T* yr = y + r * cols;
        float amax = 0.0f;
        if (row_max)
            amax = row_max[r];
        else
            row_absmax(xr, 1, cols, &amax);
        const float s = clip * amax / qmax;
        scales[r] = s;
        if (ranges) ranges[r] = clip * amax;
        if (s == 0.0f) {
            for (int64_t c = 0; c < cols; ++c) yr[c] = from_f32<T>(0.0f);
            continue;
        }
        for (int64_t c = 0; c < cols; ++c)
            yr[c] = from_f32<T>(quant_round(to_f32(xr[c]) / s, f) * s);
    }
}

template void fake_quant_rows<float>(const float*, float*, float*, int64_t, int64_t, QuantFormat,
                                     float, float*, const float*);
template void fake_quant_rows<bf16>(const bf16*, bf16*, float*, int64_t, int64_t, QuantFormat,
                                    float, float*, const float*);
template void fake_quant_rows<f16>(const f16*, f16*, float*, int64_t, int64_t, QuantFormat, float,
                                   float*, const float*);
template void row_absmax<float>(const float*, int64_t, int64_t, float*);
template void row_absmax<bf16>(const bf16*, int64_t, int64_t, float*);
template void row_absmax<f16>(const f16*, int64_t, int64_t, float*);

}  // namespace kernels
}  // namespace zt
