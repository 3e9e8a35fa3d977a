// Element types: f32, bf16, f16. Conversions round to nearest even; NaN stays NaN, overflow
// in f16 goes to infinity. Half types are plain 16-bit storage structs: arithmetic is always in f32.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace zt {

enum class DType : uint8_t { kF32 = 0, kBF16 = 1, kF16 = 2 };

size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);          // "f32", "bf16", "f16"
DType parse_dtype(const std::string& name);   // accepts f32/fp32/float32, bf16/bfloat16, f16/fp16

struct bf16 {
    uint16_t bits;
};
struct f16 {
    uint16_t bits;
};

inline float bf16_to_f32(bf16 h) {
    uint32_t u = static_cast<uint32_t>(h.bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

inline bf16 f32_to_bf16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{static_cast<uint16_t>((u >> 16) | 0x40)};
    uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
    return bf16{static_cast<uint16_t>((u + rounding) >> 16)};
}

float f16_to_f32(f16 h);
f16 f32_to_f16(float f);

// Load and store helpers so kernels can be templated on the storage type with f32 math.
inline float to_f32(float x) { return x; }
inline float to_f32(bf16 x) { return bf16_to_f32(x); }
inline float to_f32(f16 x) { return f16_to_f32(x); }
template <typename T>
inline T from_f32(float x);
template <>
inline float from_f32<float>(float x) { return x; }
template <>
inline bf16 from_f32<bf16>(float x) { return f32_to_bf16(x); }
template <>
inline f16 from_f32<f16>(float x) { return f32_to_f16(x); }

template <typename T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() { return DType::kF32; }
template <>
constexpr DType dtype_of<bf16>() { return DType::kBF16; }
template <>
constexpr DType dtype_of<f16>() { return DType::kF16; }

// dst[i] = convert(src[i]) for n elements, vectorized where the CPU allows; any pair of dtypes.
void convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, size_t n);

}  // namespace zt
