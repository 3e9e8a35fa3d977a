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

void collect(Module& m, const LinearQuant* quant, std::vector<QuantSums>& out) {
    if (auto* lin = dynamic_cast<Linear*>(&m); lin && lin->quant == quant)
        out.push_back({lin->weight.name, lin->quant_error_sq, lin->quant_weight_sq,
                       lin->weight.split.sharded()});
    for (Module* c : m.children()) collect(*c, quant, out);
}

}  // namespace

std::vector<QuantSums> linear_quant_sums(Module& model, const LinearQuant* quant) {
    std::vector<QuantSums> out;
    collect(model, quant, out);
    return out;
}

QuantError quant_error_from(const std::vector<QuantSums>& sums) {
    QuantError out;
    double err = 0, norm = 0;
    for (const QuantSums& s : sums) {
        err += s.err;
        norm += s.norm;
        out.layers.emplace_back(s.name, s.norm > 0 ? std::sqrt(s.err / s.norm) : 0.0);
    }
    out.overall = norm > 0 ? std::sqrt(err / norm) : 0.0;
    return out;
}

QuantError linear_quant_error(Module& model, const LinearQuant* quant) {
    return quant_error_from(linear_quant_sums(model, quant));
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
