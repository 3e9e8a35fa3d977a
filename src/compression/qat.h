// Quantization-aware training's options and its attachment to a model (docs/quantization.md):
// from start_step on, every targeted Linear multiplies fake-quantized weights (per output row)
// and inputs (per row: per token), int8 or fp8, with straight-through gradients (nn/layers.h
// LinearQuant, autograd ops::fake_quant_rows). Scales come from each row's own values, so every
// layout (dp, ZeRO stage, micro-batch split) quantizes alike. Left out: learned or calibrated
// scales, quantized kernels (the GEMMs still run in the compute dtype).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "autograd/module.h"
#include "nn/layers.h"

namespace zt {

struct QatOptions {
    bool enabled = false;
    bool weights = true, inputs = true;
    QuantFormat weight_format = QuantFormat::kInt8;
    QuantFormat input_format = QuantFormat::kInt8;
    float clip = 1.0f;
    int64_t start_step = 1;           // the first optimizer step (1-based) that trains quantized
    std::vector<std::string> params;  // parts of Linear weight names; empty: every Linear
};

// Points every targeted Linear of `model` at `quant`; returns how many. Throws kInput when none
// is targeted.
int attach_linear_quant(Module& model, const LinearQuant* quant,
                        const std::vector<std::string>& params);

// The weight quantization error of the last quantized forward: sqrt(sum (Q(w) - w)^2 / sum w^2)
// over every Linear that `quant` quantizes (overall) and per Linear (by weight name).
struct QuantError {
    double overall = 0;
    std::vector<std::pair<std::string, double>> layers;
};
QuantError linear_quant_error(Module& model, const LinearQuant* quant);

// The sums behind it, per Linear in module order: err = sum (Q(w) - w)^2, norm = sum w^2 over
// this rank's part of the weight (split: a tensor-parallel part).
struct QuantSums {
    std::string name;
    double err = 0, norm = 0;
    bool split = false;
};
std::vector<QuantSums> linear_quant_sums(Module& model, const LinearQuant* quant);
QuantError quant_error_from(const std::vector<QuantSums>& sums);

}  // namespace zt
