#include "runtime/comm_compression_metrics.h"

#include <cmath>

namespace zt {

nlohmann::json grad_compression_metrics(const GradCompressionOptions& o,
                                        const CompressionStats& now,
                                        const CompressionStats& before) {
    const int64_t raw = now.raw_bytes - before.raw_bytes;
    const int64_t wire = now.wire_bytes - before.wire_bytes;
    const double err = now.error_sq - before.error_sq, in = now.input_sq - before.input_sq;
    nlohmann::json g = {{"codec", o.powersgd.enabled ? "powersgd" : codec_kind_name(o.codec.kind)},
                        {"error_feedback", o.error_feedback},
                        {"raw_bytes", raw},
                        {"wire_bytes", wire}};
    if (wire > 0) g["ratio"] = static_cast<double>(raw) / static_cast<double>(wire);
    if (in > 0) g["relative_error"] = std::sqrt(err / in);
    return {{"gradients", g}};
}

}  // namespace zt
