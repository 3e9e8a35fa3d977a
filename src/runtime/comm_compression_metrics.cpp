#include "runtime/comm_compression_metrics.h"

#include <cmath>

namespace zt {

namespace {

// Bytes, ratio and relative error of what went through a codec between two snapshots.
nlohmann::json traffic(nlohmann::json g, const CompressionStats& now,
                       const CompressionStats& before) {
    const int64_t raw = now.raw_bytes - before.raw_bytes;
    const int64_t wire = now.wire_bytes - before.wire_bytes;
    const double err = now.error_sq - before.error_sq, in = now.input_sq - before.input_sq;
    g["raw_bytes"] = raw;
    g["wire_bytes"] = wire;
    if (wire > 0) g["ratio"] = static_cast<double>(raw) / static_cast<double>(wire);
    if (in > 0) g["relative_error"] = std::sqrt(err / in);
    return g;
}

}  // namespace

nlohmann::json grad_compression_metrics(const GradCompressionOptions& o,
                                        const CompressionStats& now,
                                        const CompressionStats& before) {
    return {{"gradients",
             traffic({{"codec", o.powersgd.enabled ? "powersgd" : codec_kind_name(o.codec.kind)},
                      {"error_feedback", o.error_feedback}},
                     now, before)}};
}

nlohmann::json momentum_compression_metrics(bool compressed, const CompressionStats& now,
                                            const CompressionStats& before) {
    return {{"momentum", traffic({{"codec", "onebit"},
                                  {"phase", compressed ? "compressed" : "warmup"},
                                  {"error_feedback", true}},
                                 now, before)}};
}

}  // namespace zt
