// Engine: trains a Model in one process. forward/backward of micro-batches accumulate gradients in
// the flat gradient arena (each micro-loss scaled by 1/grad_accum, DESIGN.md's equivalence rule);
// step() turns them into one optimizer update (norm, non-finite check, clipping, update, bf16 copy).
// Usable from C++: examples/custom_model.cpp drives it directly.
#pragma once

#include <memory>

#include "autograd/param_arena.h"
#include "autograd/tape.h"
#include "nn/model.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"

namespace zt {

struct EngineOptions {
    DType compute_dtype = DType::kF32;  // bf16: bf16 weights and activations, f32 master weights
    DType grad_dtype = DType::kF32;     // gradient accumulation dtype
    int64_t grad_accum = 1;             // micro-batches per optimizer step
    double gradient_clipping = 0.0;     // max global norm; 0: off
    uint64_t seed = 42;                 // initial weights depend on (seed, name, index) only
    std::unique_ptr<Optimizer> optimizer;
    std::unique_ptr<LrSchedule> schedule;  // null: the optimizer's lr stays `lr`
    double lr = 1e-3;
};

struct StepStats {
    double loss = 0;       // mean micro-batch loss since the last step
    double lr = 0;
    double grad_norm = 0;  // before clipping
    bool skipped = false;  // non-finite gradients: no update
};

class Engine {
public:
    Engine(MemoryPool& pool, std::unique_ptr<Model> model, EngineOptions options);
    Engine(const Engine&) = delete;
    Engine& operator=(const Engine&) = delete;

    // Forward of one micro-batch with the tape recording; returns the mean loss Var.
    Var forward(const Batch& batch);
    // Backward of a loss from forward(), scaled by 1 / grad_accum.
    void backward(const Var& loss);
    // forward + backward; returns the micro-batch's mean loss.
    float forward_backward(const Batch& batch);
    // Optimizer update from the accumulated gradients; zeroes them.
    StepStats step();
    // Loss without recording the tape.
    float eval_loss(const Batch& batch);

    Model& model() { return *model_; }
    ParamArena& arena() { return *arena_; }
    MemoryPool& pool() { return pool_; }
    int64_t steps_done() const { return steps_done_; }
    const EngineOptions& options() const { return options_; }

private:
    MemoryPool& pool_;
    std::unique_ptr<Model> model_;
    EngineOptions options_;
    std::unique_ptr<ParamArena> arena_;
    Tape tape_;
    std::vector<OptimSegment> segments_;
    Tensor grad_f32_;  // f32 copy of bf16 gradients for the update (bf16 accumulation only)
    int64_t steps_done_ = 0;    // optimizer steps, skipped ones included
    int64_t updates_done_ = 0;  // steps that updated the weights (Adam's bias-correction count)
    int64_t micro_done_ = 0;
    double loss_sum_ = 0;
};

}  // namespace zt
