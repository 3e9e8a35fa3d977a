// A step line's "compression" entry (docs/compression.md): for compression.gradients, the codec,
// the bytes the gradient reductions would have sent and sent on this rank during the step, their
// ratio, and the relative error of the encodings, sqrt(sum (decoded - input)^2 / sum input^2);
// for 1-bit Adam, the same for its momentum exchange; for zero_quantized_weights, the same for
// stage 3's parameter gathers ("weights").
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>

#include "comm/compressed.h"
#include "parallel/zero_context.h"

namespace zt {

// With compression.gradients.start_step, "phase": "warmup" for steps 1..start_step (reduced
// uncompressed: no bytes counted) and "compressed" after; `step` counts from 1.
nlohmann::json grad_compression_metrics(const GradCompressionOptions& o, int64_t step,
                                        const CompressionStats& now,
                                        const CompressionStats& before);
// 1-bit Adam's momentum exchange (optim/onebit_adam.h): "momentum" with the codec, the phase of
// the step ("warmup": nothing compressed, "compressed") and the same figures.
nlohmann::json momentum_compression_metrics(bool compressed, const CompressionStats& now,
                                            const CompressionStats& before);
// zero_quantized_weights (ZeRO++ qwZ): "weights" with the codec and the same figures for the
// parameter gathers this rank issued during the step (parallel/zero_module_gather.h).
nlohmann::json weight_compression_metrics(const CodecOptions& codec, const CompressionStats& now,
                                          const CompressionStats& before);

}  // namespace zt
