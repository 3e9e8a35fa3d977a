#include "runtime/qat_metrics.h"

namespace zt {

std::optional<QuantError> quantization_error(Engine& engine, const QatOptions& q, int64_t step) {
    if (!q.enabled || !q.weights || step < q.start_step) return std::nullopt;
    return engine.quantization_error();
}

nlohmann::json quantization_metrics(const std::optional<QuantError>& e, const QatOptions& q,
                                    int64_t step) {
    nlohmann::json j = {{"active", step >= q.start_step},
                        {"weights", q.weights ? quant_format_name(q.weight_format) : "none"},
                        {"activations", q.inputs ? quant_format_name(q.input_format) : "none"}};
    if (!e) return j;
    j["weight_error"] = e->overall;
    if (step == q.start_step) {
        nlohmann::json layers = nlohmann::json::object();
        for (const auto& [name, err] : e->layers) layers[name] = err;
        j["layers"] = layers;
    }
    return j;
}

}  // namespace zt
