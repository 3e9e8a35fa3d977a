#include "compression/qat.h"

#include <cmath>

#include "util/error.h"

namespace zt {

namespace {

int attach(Module& m, const LinearQuant* quant, const std::vector<std::string>& params) {
    int n = 0;
    if (auto* lin = dynamic_cast<Linear*>(&m)) {
        bool match = params.empty();
        for (const std::string& s : params)
            match = match || lin->weight.name.find(s) != std::string::npos;
        if (match) {
            lin->quant = quant;
            ++n;
        }
    }
    for (Module* c : m.children()) n += attach(*c, quant, params);
    return n;
}

void collect(Module& m, const LinearQuant* quant, double& err, double& norm, QuantError& out) {
    if (auto* lin = dynamic_cast<Linear*>(&m); lin && lin->quant == quant) {
        err += lin->quant_error_sq;
        norm += lin->quant_weight_sq;
        out.layers.emplace_back(
            lin->weight.name,
            lin->quant_weight_sq > 0 ? std::sqrt(lin->quant_error_sq / lin->quant_weight_sq) : 0.0);
    }
    for (Module* c : m.children()) collect(*c, quant, err, norm, out);
}

}  // namespace

QuantError linear_quant_error(Module& model, const LinearQuant* quant) {
    QuantError out;
    double err = 0, norm = 0;
    collect(model, quant, err, norm, out);
    out.overall = norm > 0 ? std::sqrt(err / norm) : 0.0;
    return out;
}

int attach_linear_quant(Module& model, const LinearQuant* quant,
                        const std::vector<std::string>& params) {
    const int n = attach(model, quant, params);
    std::string list;
    for (const std::string& s : params) list += (list.empty() ? "\"" : ", \"") + s + "\"";
    ZT_CHECK(n > 0, "compression.quantization.params: ",
             params.empty() ? std::string("the model has no Linear layer to quantize")
                            : str_cat("no Linear weight's name contains any of ", list),
             "; name parts of Linear weights (\"attn\", \"mlp\", \"bot_l\", ...)");
    return n;
}

}  // namespace zt
