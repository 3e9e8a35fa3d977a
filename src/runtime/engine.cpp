#include "runtime/engine.h"

#include <cmath>

#include "optim/clip.h"

namespace zt {

Engine::Engine(MemoryPool& pool, std::unique_ptr<Model> model, EngineOptions options)
    : pool_(pool), model_(std::move(model)), options_(std::move(options)), tape_(pool) {
    ZT_CHECK(options_.grad_accum >= 1, "gradient_accumulation_steps: expected >= 1, got ",
             options_.grad_accum);
    ZT_CHECK(options_.optimizer != nullptr, "engine: no optimizer given");
    ZT_CHECK(!(options_.compute_dtype == DType::kF32 && options_.grad_dtype != DType::kF32),
             "data_types.grad_accum_dtype: bf16 accumulation needs bf16 compute; set "
             "bf16.enabled=true or grad_accum_dtype=fp32");
    ArenaOptions ao;
    ao.compute_dtype = options_.compute_dtype;
    ao.grad_dtype = options_.grad_dtype;
    arena_ = std::make_unique<ParamArena>(pool_, model_->parameters(), ao);
    arena_->init_weights(options_.seed);
    for (Parameter* p : arena_->params()) segments_.push_back({p->offset, p->numel(), p->decay});
    options_.optimizer->init_state(pool_, arena_->padded_numel());
    if (options_.grad_dtype != DType::kF32)
        grad_f32_ = Tensor::zeros(pool_, {arena_->padded_numel()}, DType::kF32,
                                  MemCategory::kWorkspace);
}

Var Engine::forward(const Batch& batch) {
    ZT_ASSERT(tape_.size() == 0, "forward called twice without backward");
    tape_.set_recording(true);
    return model_->loss(tape_, batch);
}

void Engine::backward(const Var& loss) {
    tape_.backward(loss, 1.0f / static_cast<float>(options_.grad_accum));
    loss_sum_ += loss->value.data<float>()[0];
    ++micro_done_;
}

float Engine::forward_backward(const Batch& batch) {
    Var loss = forward(batch);
    float value = loss->value.data<float>()[0];
    backward(loss);
    return value;
}

float Engine::eval_loss(const Batch& batch) {
    tape_.set_recording(false);
    Var loss = model_->loss(tape_, batch);
    tape_.set_recording(true);
    return loss->value.data<float>()[0];
}

StepStats Engine::step() {
    ZT_CHECK(micro_done_ == options_.grad_accum, "engine: step() after ", micro_done_,
             " micro-batches; gradient_accumulation_steps is ", options_.grad_accum);
    StepStats st;
    st.loss = loss_sum_ / static_cast<double>(micro_done_);
    st.lr = options_.schedule ? options_.schedule->lr(updates_done_) : options_.lr;
    const int64_t n = arena_->padded_numel();
    float* grads = arena_->grads().dtype() == DType::kF32 ? arena_->grads().data<float>() : nullptr;
    if (grads == nullptr) {
        grad_f32_.copy_from(arena_->grads());
        grads = grad_f32_.data<float>();
    }
    st.grad_norm = grad_norm_l2(grads, n);
    st.skipped = !std::isfinite(st.grad_norm) || !std::isfinite(st.loss);
    if (!st.skipped) {
        if (options_.gradient_clipping > 0) {
            float coef = clip_coefficient(st.grad_norm, options_.gradient_clipping);
            if (coef < 1.0f) scale(grads, n, coef);
        }
        options_.optimizer->step(arena_->master().data<float>(), grads, segments_,
                                 static_cast<float>(st.lr), ++updates_done_);
        arena_->sync_compute();
    }
    arena_->zero_grads();
    ++steps_done_;
    micro_done_ = 0;
    loss_sum_ = 0;
    return st;
}

}  // namespace zt
