// Basic layers with PyTorch's parameter names: Linear (weight (out, in), bias), Embedding (weight
// (V, C)), LayerNorm (weight, bias; eps 1e-5 by default).
#pragma once

#include <span>

#include "autograd/module.h"
#include "autograd/ops.h"

namespace zt {

struct LinearOptions {
    int64_t in = 0, out = 0;
    float init_std = 0.02f;
    bool bias = true;
    float bias_init_std = 0.0f;  // 0: zeros; else N(0, bias_init_std) (DLRM's reference init)
};

// Quantization-aware training (compression.quantization, docs/quantization.md): while `active`,
// a Linear multiplies fake-quantized operands: its weight per output row and its input per row
// (per token), each with its own scale (ops::fake_quant_rows). One is shared by the Linears it
// applies to; the engine turns it on at its start step.
struct LinearQuant {
    bool active = false;
    bool weights = true, inputs = true;
    QuantFormat weight_format = QuantFormat::kInt8;
    QuantFormat input_format = QuantFormat::kInt8;
    float clip = 1.0f;  // scale = clip x max|row| / qmax
};

class Linear : public Module {
  public:
    explicit Linear(LinearOptions o);
    // x: (N, in) -> (N, out); use: ops.h Note [Recompute early stop]
    Var forward(Tape& tape, const Var& x, ops::OutputUse use = ops::OutputUse::kRead);
    // What forward multiplies: x and the weight, fake-quantized while `quant` is active.
    Var quant_input(Tape& tape, const Var& x) const;
    Var quant_weight(Tape& tape);
    Parameter& weight;
    Parameter* bias;                     // null without bias
    const LinearQuant* quant = nullptr;  // quantization-aware training; null: off
    // A row-parallel Linear's: its rows' maxima over the tp group (ops::fake_quant_rows), so the
    // weight's and input's scales are the whole rows'. Empty: the rows are whole here.
    ops::RowMaxReduce quant_row_max;
    // The last quantized forward's sums over the weight of (Q(w) - w)^2 and w^2, in the compute
    // dtype's values (the quantization error metrics report their ratio).
    double quant_error_sq = 0, quant_weight_sq = 0;
};

class Embedding : public Module {
  public:
    Embedding(int64_t num, int64_t dim, float init_std = 0.02f);
    // ids: (N) -> (N, C)
    Var forward(Tape& tape, std::span<const int32_t> ids);
    Parameter& weight;
};

class LayerNorm : public Module {
  public:
    explicit LayerNorm(int64_t dim, float eps = 1e-5f);
    Var forward(Tape& tape, const Var& x);
    Parameter& weight;
    Parameter& bias;
    float eps;
};

}  // namespace zt
