#include "compression/qat.h"

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

}  // namespace

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
