#include "models/quantized_weights.h"

#include <vector>

#include "checkpoint/safetensors.h"
#include "tensor/dtype.h"
#include "util/error.h"

namespace zt {

const char* quant_safetensors_dtype(QuantFormat f) {
    switch (f) {
        case QuantFormat::kInt8:
            return "I8";
        case QuantFormat::kFp8E4M3:
            return "F8_E4M3";
        case QuantFormat::kFp8E5M2:
            return "F8_E5M2";
    }
    return "?";
}

void write_quantized_weights(const std::string& path, std::span<const NamedTensorF32> params,
                             const std::set<std::string>& quantize, QuantFormat format,
                             const std::string& dtype) {
    ZT_CHECK(is_float_dtype(dtype), "export: dtype \"", dtype, "\"; expected F32, BF16 or F16");
    SafetensorsWriter writer;
    // Buffers alive until write(): codes, scales, half-precision copies.
    std::vector<std::vector<uint8_t>> codes;
    std::vector<std::vector<float>> scales;
    std::vector<std::vector<uint16_t>> half;
    codes.reserve(params.size());
    scales.reserve(params.size());
    half.reserve(params.size());
    size_t quantized = 0;
    for (const NamedTensorF32& p : params) {
        int64_t n = 1;
        for (int64_t d : p.shape) n *= d;
        if (quantize.count(p.name)) {
            ZT_CHECK(p.shape.size() == 2, "export --quantize: ", p.name, " is not a matrix");
            const int64_t rows = p.shape[0], cols = p.shape[1];
            // The scales as the fake quantization takes them; each code is the value it rounds
            // to, so code x scale is its result bit for bit.
            std::vector<float> fake(static_cast<size_t>(n));
            auto& s = scales.emplace_back(static_cast<size_t>(rows));
            kernels::fake_quant_rows(p.data, fake.data(), s.data(), rows, cols, format, 1.0f);
            auto& c = codes.emplace_back(static_cast<size_t>(n));
            for (int64_t r = 0; r < rows; ++r)
                for (int64_t k = 0; k < cols; ++k) {
                    const size_t i = static_cast<size_t>(r * cols + k);
                    c[i] = s[r] == 0.0f
                               ? 0
                               : quant_encode(quant_round(p.data[i] / s[r], format), format);
                }
            writer.add(p.name, quant_safetensors_dtype(format), p.shape, c.data(), c.size());
            writer.add(p.name + "_scale", "F32", {rows}, s.data(), s.size() * sizeof(float));
            ++quantized;
            continue;
        }
        if (dtype == "F32") {
            writer.add(p.name, dtype, p.shape, p.data, static_cast<size_t>(n) * sizeof(float));
            continue;
        }
        auto& h = half.emplace_back(static_cast<size_t>(n));
        if (n > 0)
            convert(p.data, DType::kF32, h.data(), dtype == "BF16" ? DType::kBF16 : DType::kF16, n);
        writer.add(p.name, dtype, p.shape, h.data(), h.size() * sizeof(uint16_t));
    }
    ZT_CHECK(quantized == quantize.size(), "export --quantize: ", quantize.size() - quantized,
             " of the tensors to quantize are not among the weights");
    writer.add_metadata("format", "pt");
    writer.add_metadata("producer", "zerotrain");
    writer.add_metadata("quantization",
                        str_cat(quant_format_name(format),
                                " per output row, symmetric: value = code x <name>_scale[row]"));
    writer.write(path);
}

}  // namespace zt
