// The engine's options from a run's config (runtime/trainer.h's engine_options): precision,
// loss scaling, ZeRO, offload, the optimizer and its schedule, compression.
#include "optim/adagrad.h"
#include "optim/adamw.h"
#include "optim/lion.h"
#include "optim/onebit_adam.h"
#include "optim/sgd.h"
#include "runtime/trainer.h"

namespace zt {

namespace {

std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& o) {
    if (o.type == "SGD") {
        SgdOptions so;  // as given, in double: the optimizer rounds where PyTorch does
        so.momentum = o.momentum;
        so.nesterov = o.nesterov;
        so.weight_decay = o.weight_decay;
        return std::make_unique<Sgd>(so);
    }
    if (o.type == "Adagrad") {
        AdagradOptions ao;
        ao.lr_decay = o.lr_decay;
        ao.weight_decay = o.weight_decay;
        ao.initial_accumulator_value = o.initial_accumulator_value;
        ao.eps = o.eps;
        return std::make_unique<Adagrad>(ao);
    }
    if (o.type == "Lion") {
        LionOptions lo;
        lo.beta1 = o.beta1;
        lo.beta2 = o.beta2;
        lo.weight_decay = o.weight_decay;
        return std::make_unique<Lion>(lo);
    }
    if (o.type == "OneBitAdam") {
        OneBitAdamOptions bo;
        bo.beta1 = o.beta1;
        bo.beta2 = o.beta2;
        bo.eps = o.eps;
        bo.weight_decay = o.weight_decay;
        bo.freeze_step = o.freeze_step;
        bo.exchange_update = o.onebit_exchange_update;
        return std::make_unique<OneBitAdam>(bo);
    }
    AdamWOptions ao;
    ao.beta1 = o.beta1;
    ao.beta2 = o.beta2;
    ao.eps = o.eps;
    ao.weight_decay = o.weight_decay;
    ao.adam_w_mode = o.type != "Adam";
    ao.bias_correction = o.bias_correction;
    return std::make_unique<AdamW>(ao);
}

}  // namespace

EngineOptions engine_options(const TrainConfig& cfg) {
    EngineOptions eo;
    eo.compute_dtype = cfg.precision == "bf16"   ? DType::kBF16
                       : cfg.precision == "fp16" ? DType::kF16
                                                 : DType::kF32;
    eo.grad_dtype = cfg.grad_accum_dtype == "bf16" ? DType::kBF16 : DType::kF32;
    ZT_CHECK(!(eo.compute_dtype == DType::kF16 && eo.grad_dtype != DType::kF32),
             "data_types.grad_accum_dtype: \"", cfg.grad_accum_dtype,
             "\" with fp16.enabled; "
             "fp16 training accumulates gradients in fp32: set it to \"fp32\"");
    const Fp16Config& f = cfg.fp16;
    eo.loss_scaler.static_scale = f.loss_scale;
    eo.loss_scaler.initial_scale_power = f.initial_scale_power;
    eo.loss_scaler.scale_window = f.loss_scale_window;
    eo.loss_scaler.hysteresis = f.hysteresis;
    eo.loss_scaler.consecutive_hysteresis = f.consecutive_hysteresis;
    eo.loss_scaler.min_scale = f.min_loss_scale;
    eo.nan_policy = cfg.nan_policy == "stop" ? NanPolicy::kStop : NanPolicy::kSkip;
    eo.grad_accum = cfg.grad_accum;
    eo.micro_batch = cfg.micro_batch;
    eo.gradient_clipping = cfg.gradient_clipping;
    eo.seed = cfg.seed;
    eo.lr = cfg.optimizer.lr;
    const ZeroConfig& z = cfg.zero;
    eo.zero.stage = z.stage;
    eo.zero.reduce_bucket_size = z.reduce_bucket_size;
    eo.zero.allgather_bucket_size = z.allgather_bucket_size;
    eo.zero.overlap_comm = z.overlap_comm;
    eo.zero.prefetch_bucket_size = z.stage3_prefetch_bucket_size;
    eo.zero.persistence_threshold = z.stage3_param_persistence_threshold;
    eo.zero.max_live_parameters = z.stage3_max_live_parameters;
    eo.zero.comm_dtype = parse_dtype(cfg.communication_data_type);
    eo.zero.grad_compression = cfg.grad_compression;
    eo.zero.quantized_weights = z.quantized_weights;
    eo.offload_optimizer = z.offload_optimizer;
    eo.offload_param = z.offload_param;
    eo.optimizer = make_optimizer(cfg.optimizer);
    eo.pruning = cfg.pruning;
    eo.quantization = cfg.quantization;
    if (!cfg.scheduler.type.empty())
        eo.schedule = make_lr_schedule(cfg.scheduler, cfg.optimizer.lr);
    return eo;
}

}  // namespace zt
