// Fake quantization (quantize, then dequantize) for quantization-aware training: each row of a
// (R, K) matrix gets its own symmetric scale s = clip x max|row| / qmax, and every element becomes
// the nearest value of the format times s (round to nearest even), saturated at +-qmax s:
//   int8      integers in [-127, 127]                     (qmax 127)
//   fp8 e4m3  1 sign, 4 exponent (bias 7), 3 mantissa bits (qmax 448, subnormals below 2^-6)
//   fp8 e5m2  1 sign, 5 exponent (bias 15), 2 mantissa bits (qmax 57344, subnormals below 2^-14)
// A row of zeros stays zero. clip in (0, 1]: below 1, elements past qmax s are clipped.
#pragma once

#include <cstdint>
#include <string>

namespace zt {

enum class QuantFormat { kInt8, kFp8E4M3, kFp8E5M2 };

QuantFormat parse_quant_format(const std::string& name);  // "int8", "fp8_e4m3", "fp8_e5m2"
const char* quant_format_name(QuantFormat f);
float quant_format_max(QuantFormat f);  // qmax

// The value of format f nearest to v (|v| in units of the scale), saturated at +-qmax.
float quant_round(float v, QuantFormat f);

// The storage code of a value of the format (quant_round's result): int8 as two's complement,
// fp8 as sign, exponent and mantissa bits (e4m3fn: bias 7; e5m2: bias 15), subnormals with a zero
// exponent field. quant_decode is its inverse.
uint8_t quant_encode(float v, QuantFormat f);
float quant_decode(uint8_t code, QuantFormat f);

namespace kernels {

// y[r, :] = quant_round(x[r, :] / s_r) s_r with s_r = clip max|x[r, :]| / qmax; scales[r] = s_r
// and, when given, ranges[r] = clip max|x[r, :]| (elements above it in magnitude were clipped).
// row_max, when given, is each row's max|x| over the whole row, of which x holds a part (a
// row-parallel Linear's columns on one rank), in place of the part's own.
// T: float, bf16 or f16 (computed in f32, stored as T).
template <typename T>
void fake_quant_rows(const T* x, T* y, float* scales, int64_t rows, int64_t cols, QuantFormat f,
                     float clip, float* ranges = nullptr, const float* row_max = nullptr);
// out[r] = max|x[r, :]|.
template <typename T>
void row_absmax(const T* x, int64_t rows, int64_t cols, float* out);

}  // namespace kernels
}  // namespace zt
