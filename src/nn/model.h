// Model: a Module that turns a batch into a scalar loss; what Engine trains. GPT (gpt.h) is one;
// a C++ program can define its own (examples/custom_model.cpp).
#pragma once

#include <cstdint>
#include <span>

#include "autograd/module.h"

namespace zt {

// A micro-batch of token sequences: inputs and targets are (B, T) row-major; a target < 0 is
// ignored by the loss.
struct Batch {
    std::span<const int32_t> inputs;
    std::span<const int32_t> targets;
    int64_t B = 0;
    int64_t T = 0;
};

class Model : public Module {
public:
    using Module::Module;
    // Mean loss over the batch's counted targets, as a scalar f32 Var.
    virtual Var loss(Tape& tape, const Batch& batch) = 0;
    // Model FLOPs per token for MFU (0 if unknown).
    virtual double flops_per_token() const { return 0; }
};

}  // namespace zt
