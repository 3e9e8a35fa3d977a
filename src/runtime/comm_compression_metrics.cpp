#include "runtime/comm_compression_metrics.h"

namespace zt {

nlohmann::json grad_compression_metrics(const GradCompressionOptions& o, int64_t step,
                                        const CompressionStats& now,
                                        const CompressionStats& before) {
    nlohmann::json g = {{"codec", o.powersgd.enabled ? "powersgd" : codec_kind_name(o.codec.kind)},
                        {"error_feedback", o.error_feedback}};
    if (o.start_step > 0) g["phase"] = step <= o.start_step ? "warmup" : "compressed";
    return {{"gradients", add_compression_json(g, now.minus(before))}};
}

nlohmann::json momentum_compression_metrics(bool compressed, const CompressionStats& now,
                                            const CompressionStats& before) {
    nlohmann::json m = {{"codec", "onebit"},
                        {"phase", compressed ? "compressed" : "warmup"},
                        {"error_feedback", true}};
    return {{"momentum", add_compression_json(m, now.minus(before))}};
}

nlohmann::json weight_compression_metrics(const CodecOptions& codec, const CompressionStats& now,
                                          const CompressionStats& before) {
    nlohmann::json w = {{"codec", codec_kind_name(codec.kind)}, {"error_feedback", false}};
    return {{"weights", add_compression_json(w, now.minus(before))}};
}

}  // namespace zt
