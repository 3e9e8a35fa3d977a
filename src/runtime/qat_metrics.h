// The "quantization" entry of a metrics line (docs/quantization.md, "Metrics").
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>

#include "compression/qat.h"
#include "runtime/engine.h"

namespace zt {

// The weight quantization error after optimizer step `step` when QAT quantizes weights by then
// (nullopt otherwise). Collective over tp and pp: every rank calls it.
std::optional<QuantError> quantization_error(Engine& engine, const QatOptions& q, int64_t step);

// Whether step `step` trained quantized, the formats, and the weight quantization error `e`
// (overall; per Linear on the first quantized step).
nlohmann::json quantization_metrics(const std::optional<QuantError>& e, const QatOptions& q,
                                    int64_t step);

}  // namespace zt
