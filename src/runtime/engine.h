// Engine: trains a Model in one process. forward/backward of micro-batches accumulate gradients in
// the flat gradient arena (each micro-loss scaled by 1/grad_accum, DESIGN.md's equivalence rule);
// step() turns them into one optimizer update (norm, non-finite check, clipping, update, bf16/f16
// copy). fp16 (compute_dtype f16) scales each micro-loss by the loss scaler's scale and unscales
// the gradients at step(); Note [Non-finite steps] in engine.cpp says what skips and what stops.
// Usable from C++: examples/custom_model.cpp drives it directly.
#pragma once

#include <memory>

#include "autograd/param_arena.h"
#include "autograd/tape.h"
#include "compression/pruner.h"
#include "compression/qat.h"
#include "nn/model.h"
#include "offload/update_tier.h"
#include "optim/loss_scaler.h"
#include "optim/lr_schedule.h"
#include "optim/onebit_adam.h"
#include "optim/optimizer.h"
#include "parallel/momentum_exchange.h"
#include "parallel/tensor_parallel.h"
#include "parallel/zero.h"

namespace zt {

// What a step with a non-finite loss or gradients does (the top-level "nan_policy").
enum class NanPolicy {
    kSkip,  // skip the update and report it (StepStats::skipped)
    kStop,  // throw a zt::Error naming the module whose output first went non-finite
};

struct EngineOptions {
    DType compute_dtype = DType::kF32;  // bf16/f16: half weights and activations, f32 master
    DType grad_dtype = DType::kF32;     // gradient accumulation dtype (f32 with f16 compute)
    LossScalerOptions loss_scaler;      // f16 compute only: DeepSpeed's "fp16" section
    NanPolicy nan_policy = NanPolicy::kSkip;
    int64_t grad_accum = 1;          // micro-batches per optimizer step
    int64_t micro_batch = 1;         // samples per micro-batch (sizing embedding plans)
    // parallel.batch_shares: this dp rank's samples over the micro-batch (runtime/batch_shares.h);
    // its loss and gradients weigh so much in the dp average.
    double batch_share = 1.0;
    double gradient_clipping = 0.0;  // max global norm; 0: off
    uint64_t seed = 42;              // initial weights depend on (seed, name, index) only
    std::unique_ptr<Optimizer> optimizer;
    std::unique_ptr<LrSchedule> schedule;  // null: the optimizer's lr stays `lr`
    double lr = 1e-3;
    // Data parallelism: the dp group (null: one rank) and the ZeRO stage with its settings.
    // Every rank scales its micro-losses by 1 / (grad_accum x ranks) (the equivalence rule).
    Communicator* comm = nullptr;
    ZeroOptions zero;
    // The model's tensor-parallel group (parallel/tensor_parallel.h): the gradient norm sums over
    // it, counting parameters held whole once.
    TensorParallel tp;
    // Pipeline parallelism: the pipeline group (stage s is its rank s) and the pair of its first
    // and last stage that hold the tied embedding (null elsewhere). A pipeline runner
    // (runtime/pipeline_runner.h) drives the micro-batches; the loss and the gradient norm sum
    // over the stages, tied parameters counted once.
    Communicator* pp = nullptr;
    Communicator* tied = nullptr;
    // Where the master weights and optimizer state live (zero_optimization.offload_optimizer).
    OffloadOptimizerOptions offload_optimizer;
    // Stage 3's compute weights on a tier (zero_optimization.offload_param); needs the optimizer
    // offloaded too.
    OffloadParamOptions offload_param;
    // compression.pruning: masks kept with the optimizer state (compression/pruner.h); needs
    // one tensor-parallel part and one pipeline stage.
    PruningOptions pruning;
    // compression.quantization: fake-quantized Linears from a start step (compression/qat.h);
    // needs one tensor-parallel part and one pipeline stage.
    QatOptions quantization;
};

struct StepStats {
    double loss = 0;  // mean micro-batch loss since the last step, over all ranks
    double lr = 0;
    double grad_norm = 0;   // before clipping (unscaled in fp16); non-finite when skipped
    bool skipped = false;   // non-finite loss or gradients (fp16: overflow): no update
    double loss_scale = 0;  // fp16: the scale this step's gradients were computed with; else 0
};

// The engine's counters and loss scaler: with the master weights and the optimizer state, what a
// checkpoint must hold for a bit-exact resume (gradients are zero between steps).
struct EngineCounters {
    int64_t steps_done = 0;    // optimizer steps, skipped ones included
    int64_t updates_done = 0;  // steps that updated the weights
    bool has_scaler = false;   // fp16
    LossScalerState scaler;
};

class Engine {
  public:
    Engine(MemoryPool& pool, std::unique_ptr<Model> model, EngineOptions options);
    Engine(const Engine&) = delete;
    Engine& operator=(const Engine&) = delete;

    // Forward of one micro-batch with the tape recording; returns the mean loss Var.
    Var forward(const Batch& batch);
    // Progressive validation (docs/streaming.md): while set (non-null), each training forward
    // also appends the model's outputs and labels (Model::eval), scored before the model learns
    // from the batch.
    void set_forward_outputs(std::vector<float>* outputs, std::vector<float>* labels) {
        fwd_outputs_ = outputs;
        fwd_labels_ = labels;
    }
    // Backward of a loss from forward(), scaled by 1 / grad_accum (fp16: loss_scale / grad_accum).
    void backward(const Var& loss);
    // forward + backward; returns the micro-batch's mean loss.
    float forward_backward(const Batch& batch);
    // Pipeline parallelism (runtime/pipeline_runner.h records and runs the tapes itself):
    // the seed of each micro-batch's backward (1 / (grad_accum x dp), fp16: times the scale);
    // one micro-batch done (its loss on the last stage, 0 elsewhere); and, after the step's last
    // backward, the tied parameters' gradients summed over the first and last stage and the
    // data-parallel reduction of every gradient.
    float micro_loss_seed() const;
    // Before a pipeline step's or evaluation's forwards: whether the Linears quantize them
    // (compression.quantization), as forward() and eval_loss() set it.
    void pipeline_begin_forwards() { linear_quant_.active = quantizing(); }
    void pipeline_micro_done(double loss);
    void pipeline_reduce_grads();
    // Pipeline parallelism: this stage's parameters that another stage holds too.
    const std::vector<Parameter*>& tied_parameters() const { return tied_; }
    // Optimizer update from the accumulated gradients; zeroes them. With nan_policy kStop, a
    // non-finite step throws zt::Error (kInternal) instead; fp16 gradient overflows are left to
    // the loss scaler, which throws at its minimum scale.
    StepStats step();
    // Loss without recording the tape; with `outputs` and `labels`, also the model's per-sample
    // outputs and labels (Model::eval).
    float eval_loss(const Batch& batch, std::vector<float>* outputs = nullptr,
                    std::vector<float>* labels = nullptr);

    Model& model() { return *model_; }
    ParamArena& arena() { return *arena_; }
    ZeroDataParallel& data_parallel() { return *dp_; }
    // Parameters outside the arena (sharded embedding tables); null when the model has none.
    SparseParams* sparse_params() { return sparse_; }
    // Tables that update a step late (embedding.staleness) apply the update they hold, with the
    // last step's rate: before a checkpoint and the final weights (Note [Stale embedding updates]).
    void apply_held_sparse() {
        if (sparse_) sparse_->apply_held(last_lr_, options_.lr, updates_done_);
    }
    // Whole-arena f32 master weights (every rank calls it: a collective when they are
    // partitioned), and loading them from such a copy (init_from; a collective too).
    std::vector<float> gather_master();
    void load_master(const float* whole);
    // This rank's master weights and optimizer state over the update range, on their tier.
    UpdateState& update_state() { return *state_; }
    // Bytes of gradients held in host memory outside the budget (Note [Gradients on the host]).
    int64_t host_grad_bytes() const { return host_pool_ ? host_pool_->stats().total_current : 0; }
    // Stage 3's compute weights on their tier (offload_param), or null.
    const ParamTier* param_tier() const { return param_tier_.get(); }
    MemoryPool& pool() { return pool_; }
    int64_t steps_done() const { return steps_done_; }
    Optimizer& optimizer() { return *options_.optimizer; }
    EngineCounters counters() const;
    // After the master weights and optimizer state were set (a resume): sets the counters (and
    // the loss scaler, when both have one) and refreshes the compute weights (collective).
    void restore(const EngineCounters& c);
    const EngineOptions& options() const { return options_; }
    // The fp16 loss scaler; null in f32 and bf16.
    const LossScaler* loss_scaler() const { return scaler_.get(); }
    LossScaler* loss_scaler() { return scaler_.get(); }
    // compression.pruning's masks and counts; null without pruning.
    const Pruner* pruner() const { return pruner_.get(); }
    Pruner* pruner() { return pruner_.get(); }
    // Quantization-aware training: whether the next forward runs quantized (the start step is
    // reached and it is not paused); pausing evaluates the full-precision model beside it.
    bool quantizing() const;
    void pause_quantization(bool paused) { quant_paused_ = paused; }
    // The weight quantization error of the last quantized forward (compression/qat.h).
    // Collective over tp and pp (engine_qat.cpp): the whole model's, as one process's.
    QuantError quantization_error();
    // What a checkpoint keeps of the communication (comm_state_checkpoint.h): 1-bit Adam's
    // momentum exchange when there is one, else the gradient transport.
    ResidualState& comm_state();
    // 1-bit Adam (optimizer.type "OneBitAdam"): whether the next update runs in the compressed
    // phase, and what its momentum exchange sent so far (null: not 1-bit Adam or one rank).
    bool onebit_compressing() const;
    const CompressionStats* momentum_compression_stats() const {
        return momentum_ ? &momentum_->stats() : nullptr;
    }

  private:
    // Throws the nan_policy "stop" error for step steps_done_ + 1.
    [[noreturn]] void stop_on_nonfinite(double loss);
    void finish_step();   // zeroes gradients and the micro-batch counters
    double last_lr_ = 0;  // the rate of the last update (apply_held_sparse)
    // The squared gradient norm over every rank (dp and tp) of the update range's f32 gradients
    // g; fp16: unscaled by inv first (in place). In two halves: this rank's part of the
    // data-parallel sum (grad_sq_local), and from that sum the norm over tp and pp
    // (grad_sq_over_model_ranks).
    double grad_sq_local(float* g, float inv);
    double grad_sq_over_model_ranks(double dp_sum);
    // Sequence parallelism: sums the whole parameters' gradients in `update_grads` over tp.
    void sum_whole_grads_over_tp(Tensor& update_grads);
    // 1-bit Adam (engine_onebit.cpp, Note [1-bit Adam]): checks the layout and makes the
    // exchange; in the compressed phase, the gradient norm from the ranks' local gradients, and
    // the agreed momentum written over the local gradients g (n values).
    void init_onebit();
    double onebit_grad_sq(float* g);
    void onebit_momentum(float* g, int64_t n);

    MemoryPool& pool_;
    std::unique_ptr<Model> model_;
    EngineOptions options_;
    // Host memory outside the device budget: the gradients under offload at stages 2-3 (Note
    // [Gradients on the host]); null otherwise. Outlives the arena.
    std::unique_ptr<MemoryPool> host_pool_;
    std::unique_ptr<ParamArena> arena_;
    std::unique_ptr<ParamTier> param_tier_;  // offload_param; outlives dp_ and state_
    std::unique_ptr<ZeroDataParallel> dp_;
    std::unique_ptr<UpdateState> state_;
    Tape tape_;
    std::vector<OptimSegment> segments_;
    // Tensor and pipeline parallelism: the arena ranges this rank's gradient norm counts
    // (tp_norm_weight 1, tied parameters on the first stage only); used when either is on.
    std::vector<Range> tp_counted_;
    bool norm_by_ranges_ = false;
    std::vector<Parameter*> tied_;  // pipeline: parameters another stage holds too
    // Sequence parallelism: the arena ranges of parameters held whole, whose gradients are summed
    // over the tp group before the step (Note [Sequence parallelism]).
    std::vector<Range> tp_whole_;
    Tensor grad_f32_;  // f32 copy of bf16 gradients of the update range (bf16 accumulation only)
    std::unique_ptr<LossScaler> scaler_;         // f16 compute only
    SparseParams* sparse_ = nullptr;             // the model's, when it has some
    std::vector<float>* fwd_outputs_ = nullptr;  // set_forward_outputs
    std::vector<float>* fwd_labels_ = nullptr;
    std::unique_ptr<Pruner> pruner_;              // compression.pruning
    const OneBitAdam* onebit_ = nullptr;          // the optimizer, when it is 1-bit Adam
    std::unique_ptr<MomentumExchange> momentum_;  // its exchange (more than one dp rank)
    LinearQuant linear_quant_;                    // compression.quantization, shared by the Linears
    bool quant_paused_ = false;
    int64_t steps_done_ = 0;    // optimizer steps, skipped ones included
    int64_t updates_done_ = 0;  // steps that updated the weights (Adam's bias-correction count)
    int64_t micro_done_ = 0;
    double loss_sum_ = 0;
};

}  // namespace zt
