// Quantized weights files (`zerotrain export --quantize FORMAT`, docs/quantization.md): the
// quantized matrices as int8 or fp8 codes with one f32 scale per row, the rest in a float dtype.
// A quantized tensor NAME [out, in] is stored as NAME with dtype I8, F8_E4M3 or F8_E5M2 (the
// codes of tensor/kernels/fake_quant.h) and NAME_scale F32 [out]; its value is code x scale[row],
// the same numbers quantization-aware training's forward multiplies.
#pragma once

#include <set>
#include <span>
#include <string>

#include "models/named_tensor.h"
#include "tensor/kernels/fake_quant.h"

namespace zt {

// "I8", "F8_E4M3", "F8_E5M2".
const char* quant_safetensors_dtype(QuantFormat f);

// Writes params (quantize: the names to quantize, each a matrix) atomically; the others in
// `dtype` ("F32", "BF16" or "F16"). Metadata says the format and how to dequantize.
void write_quantized_weights(const std::string& path, std::span<const NamedTensorF32> params,
                             const std::set<std::string>& quantize, QuantFormat format,
                             const std::string& dtype);

}  // namespace zt
