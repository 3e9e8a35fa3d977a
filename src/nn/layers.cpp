#include "nn/layers.h"

namespace zt {

Linear::Linear(LinearOptions o)
    : weight(register_parameter("weight", {o.out, o.in}, ParamInit::normal(o.init_std), true)),
      bias(nullptr) {
    weight.prunable = true;
    if (o.bias)
        bias = &register_parameter(
            "bias", {o.out},
            o.bias_init_std > 0 ? ParamInit::normal(o.bias_init_std) : ParamInit::zeros(), false);
}

Var Linear::forward(Tape& tape, const Var& x, ops::OutputUse use) {
    return call(tape, [&] {
        return ops::linear(tape, quant_input(tape, x), quant_weight(tape),
                           bias ? &bias->var : nullptr, use);
    });
}

Var Linear::quant_input(Tape& tape, const Var& x) const {
    if (!quant || !quant->active || !quant->inputs) return x;
    return ops::fake_quant_rows(tape, x, quant->input_format, quant->clip, quant_row_max);
}

Var Linear::quant_weight(Tape& tape) {
    if (!quant || !quant->active || !quant->weights) return weight.var;
    Var q =
        ops::fake_quant_rows(tape, weight.var, quant->weight_format, quant->clip, quant_row_max);
    const std::vector<float> w = weight.var->value.to_vector(), v = q->value.to_vector();
    quant_error_sq = quant_weight_sq = 0;
    for (size_t i = 0; i < w.size(); ++i) {
        const double d = static_cast<double>(v[i]) - w[i];
        quant_error_sq += d * d;
        quant_weight_sq += static_cast<double>(w[i]) * w[i];
    }
    return q;
}

Embedding::Embedding(int64_t num, int64_t dim, float init_std)
    : weight(register_parameter("weight", {num, dim}, ParamInit::normal(init_std), true)) {}

Var Embedding::forward(Tape& tape, std::span<const int32_t> ids) {
    return call(tape, [&] { return ops::embedding(tape, weight.var, ids); });
}

LayerNorm::LayerNorm(int64_t dim, float eps_)
    : weight(register_parameter("weight", {dim}, ParamInit::ones(), false)),
      bias(register_parameter("bias", {dim}, ParamInit::zeros(), false)),
      eps(eps_) {}

Var LayerNorm::forward(Tape& tape, const Var& x) {
    return call(tape, [&] { return ops::layernorm(tape, x, weight.var, bias.var, eps); });
}

}  // namespace zt
