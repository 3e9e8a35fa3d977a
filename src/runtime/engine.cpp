#include "runtime/engine.h"

#include <algorithm>
#include <cmath>

#include "compression/masked_optimizer.h"
#include "models/pipeline_model.h"
#include "optim/clip.h"
#include "parallel/grad_transport.h"
#include "tensor/kernels/elementwise.h"

// Note [Non-finite steps]
// A step is non-finite when its mean loss or the global gradient norm is NaN or infinite (one bad
// gradient element makes the norm non-finite, so the norm is the check).
// - f32 and bf16: nan_policy "skip" skips the update and reports it (StepStats::skipped);
//   "stop" throws, naming the module whose output first went non-finite (the tape watches every
//   module output during forward when the policy is "stop"), or the first parameter whose
//   gradient did when the forward was finite.
// - fp16: non-finite gradients are an overflow of the scaled backward, an expected event: the
//   loss scaler skips the step and lowers the scale (DeepSpeed's hysteresis rules, whatever the
//   policy). A non-finite loss cannot come from the scale (the forward is not scaled), so
//   "stop" throws for it; "skip" hands it to the scaler like any overflow, as DeepSpeed does.
// Skipped steps count toward steps_done() but not toward the optimizer's update count or the
// learning-rate schedule.

namespace zt {

Engine::Engine(MemoryPool& pool, std::unique_ptr<Model> model, EngineOptions options)
    : pool_(pool), model_(std::move(model)), options_(std::move(options)), tape_(pool) {
    ZT_CHECK(options_.grad_accum >= 1, "gradient_accumulation_steps: expected >= 1, got ",
             options_.grad_accum);
    ZT_CHECK(options_.optimizer != nullptr, "engine: no optimizer given");
    ZT_CHECK(!(options_.compute_dtype == DType::kF32 && options_.grad_dtype != DType::kF32),
             "data_types.grad_accum_dtype: bf16 accumulation needs bf16 compute; set "
             "bf16.enabled=true or grad_accum_dtype=fp32");
    ZT_CHECK(!(options_.compute_dtype == DType::kF16 && options_.grad_dtype != DType::kF32),
             "data_types.grad_accum_dtype: fp16 training accumulates gradients in fp32; set "
             "grad_accum_dtype=fp32 (or use bf16.enabled=true for bf16 accumulation)");
    const int ranks = options_.comm ? options_.comm->size() : 1;
    const int rank = options_.comm ? options_.comm->rank() : 0;
    std::vector<Parameter*> params = model_->parameters();
    int64_t numel = 0;
    for (Parameter* p : params) numel += p->numel();
    // Names this rank's offload files apart from every other rank's, tp peers included.
    std::string tier_name =
        options_.tp.active() ? str_cat(rank, "-tp", options_.tp.rank()) : std::to_string(rank);
    if (options_.pp) tier_name += str_cat("-pp", options_.pp->rank());
    ArenaOptions ao = zero_arena_options(options_.zero.stage, options_.compute_dtype,
                                         options_.grad_dtype, numel, ranks, rank);
    const bool offloaded = options_.offload_optimizer.device != "none";
    const bool params_offloaded = options_.offload_param.device != "none";
    ZT_CHECK(!params_offloaded || (offloaded && options_.zero.stage == 3),
             "zero_optimization.offload_param needs stage 3 and offload_optimizer (\"cpu\" or "
             "\"nvme\"): the weights are partitioned, gathered per module, and written by the "
             "offloaded optimizer step");
    if (options_.quantization.enabled) {
        const QatOptions& q = options_.quantization;
        linear_quant_ = {false, q.weights, q.inputs, q.weight_format, q.input_format, q.clip};
        attach_linear_quant(*model_, &linear_quant_, q.params);
    }
    onebit_ = dynamic_cast<const OneBitAdam*>(options_.optimizer.get());
    if (options_.pruning.enabled()) {
        options_.optimizer = std::make_unique<MaskedOptimizer>(std::move(options_.optimizer));
    }
    ao.hold_master = !offloaded;
    ao.hold_compute = !params_offloaded;
    // Note [Gradients on the host]
    // With the optimizer offloaded at ZeRO stages 2-3, the rank's owned gradients live in host
    // memory, outside the device budget, as in DeepSpeed's ZeRO-Offload: each bucket's reduced
    // slice is added straight into them as its reduction lands (a GPU run's device-to-host copy
    // of that slice), the device keeps only the buckets in flight, and the offloaded step reads
    // them in place (TieredStateOptions::grads_on_host). So does the f32 copy the update reads
    // when gradients accumulate in bf16. Stages 0-1 keep the whole gradient on the device (their
    // reduction works on it there), as does a run without offload. The arithmetic is the same;
    // only where the bytes live changes.
    const bool grads_on_host =
        offloaded && !ao.full_grads && options_.offload_optimizer.ratio >= 1.0;
    if (grads_on_host) {
        host_pool_ = std::make_unique<MemoryPool>();
        ao.grads_pool = host_pool_.get();
    }
    arena_ = std::make_unique<ParamArena>(pool_, std::move(params), ao);
    arena_->init_weights(options_.seed);
    param_tier_ =
        make_param_tier(options_.offload_param, options_.offload_optimizer.aio,
                        arena_->owned_hi() - arena_->owned_lo(), options_.compute_dtype, tier_name);
    dp_ = std::make_unique<ZeroDataParallel>(pool_, *model_, *arena_, options_.comm, options_.zero,
                                             param_tier_.get());
    segments_ = dp_->update_segments();
    const Range u = dp_->update_range();
    const int64_t update_numel = u.size();
    Tensor master = dp_->update_master();
    state_ = make_update_state(options_.offload_optimizer, *options_.optimizer, pool_,
                               master.defined() ? master.data<float>() : nullptr, update_numel,
                               dp_->update_compute(), tier_name, param_tier_.get(), grads_on_host);
    if (offloaded) {  // the tier starts empty: the initial weights go there, then everywhere
        state_->init([&](int64_t lo, int64_t n, float* out) {
            arena_->fill_init(options_.seed, u.lo + lo, n, out);
        });
        dp_->after_update();
    }
    if (options_.pruning.enabled()) {
        const auto& masked = static_cast<const MaskedOptimizer&>(*options_.optimizer);
        const bool rows = options_.pruning.type == "rows";
        std::vector<PruneRowTable> tables;
        std::vector<PruneTarget> targets;
        if (rows) {  // the model says where its tables are
            const auto* rp = dynamic_cast<const RowPrunable*>(model_.get());
            if (rp != nullptr) tables = rp->prune_row_tables();
            ZT_CHECK(!tables.empty(),
                     "compression.pruning.type \"rows\": this model has no embedding table in "
                     "the parameter arena to prune (DLRM without an \"embedding\" section has)");
            for (const PruneRowTable& t : tables)
                targets.push_back({t.name, t.offset, t.rows, t.dim});
        } else {
            targets = prune_targets(arena_->params(), options_.pruning.params);
        }
        std::unique_ptr<PruneView> view;  // the whole model's, over tp and pp
        if (options_.tp.active() || (options_.pp != nullptr && options_.pp->size() > 1))
            view = std::make_unique<PruneView>(arena_->params(), targets, options_.tp.comm,
                                               options_.pp);
        pruner_ =
            std::make_unique<Pruner>(options_.pruning, std::move(targets), arena_->padded_numel(),
                                     u, 1 + masked.mask_index(), std::move(view));
        if (rows) pruner_->set_row_tables(std::move(tables));
        if (options_.pruning.type == "structured") {  // the model says where its units are
            const auto* sp = dynamic_cast<const StructuredPrunable*>(model_.get());
            ZT_CHECK(sp != nullptr,
                     "compression.pruning.type \"structured\": this model has no heads or "
                     "channels to prune (GPT has); use \"magnitude\" or \"nm\"");
            pruner_->set_unit_groups(sp->prune_groups());
        }
    }
    if (options_.grad_dtype != DType::kF32)
        grad_f32_ = Tensor::zeros(host_pool_ ? *host_pool_ : pool_, {update_numel}, DType::kF32,
                                  MemCategory::kWorkspace);
    if (options_.compute_dtype == DType::kF16)
        scaler_ = std::make_unique<LossScaler>(options_.loss_scaler);
    if (options_.pp)
        if (auto* pm = dynamic_cast<PipelineModel*>(model_.get())) tied_ = pm->tied_parameters();
    norm_by_ranges_ = options_.tp.active() || options_.pp != nullptr;
    for (Parameter* p : arena_->params()) {
        // A tied parameter's gradient is the same sum on the first and last stage: counted once.
        const bool tied_copy = options_.pp && options_.pp->rank() != 0 &&
                               std::find(tied_.begin(), tied_.end(), p) != tied_.end();
        if (options_.tp.splits_rows() && !p->split.sharded()) {
            if (!tp_whole_.empty() && tp_whole_.back().hi == p->offset)
                tp_whole_.back().hi += p->numel();
            else
                tp_whole_.push_back({p->offset, p->offset + p->numel()});
        }
        if (tp_norm_weight(*p, options_.tp) == 0 || tied_copy) continue;
        if (!tp_counted_.empty() && tp_counted_.back().hi == p->offset)
            tp_counted_.back().hi += p->numel();
        else
            tp_counted_.push_back({p->offset, p->offset + p->numel()});
    }
    tape_.set_check_finite(options_.nan_policy == NanPolicy::kStop);
    ModelContext ctx;
    ctx.pool = &pool_;
    ctx.comm = options_.comm;
    ctx.seed = options_.seed;
    ctx.compute_dtype = options_.compute_dtype;
    ctx.budget_bytes_per_rank = pool_.budget();
    ctx.micro_batch = options_.micro_batch;
    ctx.grad_accum = options_.grad_accum;
    model_->attach(ctx);
    sparse_ = model_->sparse_params();
    if (sparse_)  // their gradient rows before dense buckets (Note [Priority])
        if (std::function<void()> done = dp_->prioritize_backward_exchange())
            sparse_->on_backward_exchange(std::move(done));
    if (onebit_) init_onebit();
    ZT_CHECK(!(sparse_ && scaler_),
             "sharded embedding tables train with fp32 or bf16 compute, not fp16 (their sparse "
             "gradients are not loss-scaled); use bf16.enabled or embedding.sharding "
             "\"data_parallel\"");
}

bool Engine::quantizing() const {
    return options_.quantization.enabled && !quant_paused_ &&
           steps_done_ + 1 >= options_.quantization.start_step;
}

Var Engine::forward(const Batch& batch) {
    ZT_ASSERT(tape_.size() == 0, "forward called twice without backward");
    linear_quant_.active = quantizing();
    if (micro_done_ == 0) tape_.clear_nonfinite();  // watch this step's forwards only
    tape_.set_recording(true);
    if (pruner_ && pruner_->counts_rows() && batch.click != nullptr &&
        steps_done_ < pruner_->options().end_step)  // counts after end_step choose nothing
        pruner_->count(*batch.click);
    if (fwd_outputs_) return model_->train_outputs(tape_, batch, *fwd_outputs_, *fwd_labels_);
    return model_->loss(tape_, batch);
}

void Engine::backward(const Var& loss) {
    const double scale = scaler_ ? scaler_->scale() : 1.0;
    const double micro_batches = static_cast<double>(options_.grad_accum * dp_->ranks());
    dp_->grad_transport().begin_step(steps_done_);  // Note [Uncompressed warm-up]
    // 1-bit Adam's compressed phase keeps the gradients local (Note [1-bit Adam]).
    dp_->begin_backward(micro_done_ + 1 == options_.grad_accum && !onebit_compressing());
    tape_.backward(loss, static_cast<float>(scale * options_.batch_share / micro_batches));
    dp_->end_backward();
    loss_sum_ += options_.batch_share * loss->value.data<float>()[0];
    ++micro_done_;
}

float Engine::forward_backward(const Batch& batch) {
    Var loss = forward(batch);
    float value = loss->value.data<float>()[0];
    backward(loss);
    return value;
}

float Engine::micro_loss_seed() const {
    const double scale = scaler_ ? scaler_->scale() : 1.0;
    return static_cast<float>(scale / static_cast<double>(options_.grad_accum * dp_->ranks()));
}

void Engine::pipeline_micro_done(double loss) {
    loss_sum_ += loss;
    ++micro_done_;
}

void Engine::pipeline_reduce_grads() {
    if (options_.tied)
        for (Parameter* p : tied_)
            options_.tied->all_reduce(p->grad.raw(), p->grad.numel(), comm_type_of(p->grad.dtype()))
                ->wait();
    dp_->grad_transport().begin_step(steps_done_);  // Note [Uncompressed warm-up]
    dp_->begin_backward(true);
    dp_->end_backward();
}

float Engine::eval_loss(const Batch& batch, std::vector<float>* outputs,
                        std::vector<float>* labels) {
    const bool watch = tape_.check_finite();
    tape_.set_check_finite(false);  // the watch is for training steps
    tape_.set_recording(false);
    linear_quant_.active = quantizing();
    Var loss = outputs && labels ? model_->eval(tape_, batch, *outputs, *labels)
                                 : model_->loss(tape_, batch);
    dp_->end_forward_only();
    tape_.set_recording(true);
    tape_.set_check_finite(watch);
    return loss->value.data<float>()[0];
}

StepStats Engine::step() {
    ZT_CHECK(micro_done_ == options_.grad_accum, "engine: step() after ", micro_done_,
             " micro-batches; gradient_accumulation_steps is ", options_.grad_accum);
    StepStats st;
    double loss_sum = loss_sum_;  // a pipeline's losses are on its last stage
    if (options_.pp) options_.pp->all_reduce(&loss_sum, 1, CommType::kF64)->wait();
    const double loss_div = static_cast<double>(micro_done_ * dp_->ranks());
    st.lr = options_.schedule ? options_.schedule->lr(updates_done_) : options_.lr;
    Tensor update_grads = dp_->update_grads();
    if (!tp_whole_.empty()) sum_whole_grads_over_tp(update_grads);
    const int64_t n = update_grads.numel();
    float* grads = update_grads.dtype() == DType::kF32 ? update_grads.data<float>() : nullptr;
    if (grads == nullptr) {
        grad_f32_.copy_from(update_grads);
        grads = grad_f32_.data<float>();
    }
    if (pruner_) pruner_->mask_grads(grads);  // pruned weights are not parameters
    const bool onebit_local = onebit_compressing();
    if (onebit_local) {  // the gradients were never reduced
        st.loss = dp_->sum_over_ranks(loss_sum) / loss_div;
        double sq = onebit_grad_sq(grads);
        if (sparse_) {  // the tables' own exchange ran: their gradient is the global one
            sparse_->finish_grads();
            sq += dp_->sum_over_ranks(sparse_->grad_sq_sum());
        }
        st.grad_norm = std::sqrt(sq);
    } else {
        // Note [The step's scalars in one collective]
        // The step's loss, the gradient norm's part of a rank that updates a partition (ZeRO
        // stages 1-3) and the sharded tables' part are each a sum over the data-parallel ranks.
        // They travel in one all-gather instead of one each: every collective is a rendezvous of
        // the ranks, about 0.1 ms on a 2-vCPU VM whatever its size, and in a sub-millisecond
        // step (the planner bench's DLRM at 512 samples) the two extra ones made ZeRO-1 and
        // ZeRO-2 slower than ZeRO-0. Each is still summed from 0 in rank order: the same bits
        // as one sum_over_ranks each. The norm's tp and pp sums follow the dp sum, as before.
        // fp16: the unscale is fused with the norm, which is also the overflow check.
        if (scaler_) st.loss_scale = scaler_->scale();
        const float inv = scaler_ ? static_cast<float>(1.0 / st.loss_scale) : 1.0f;
        const double dense = grad_sq_local(grads, inv);
        const bool dense_over_dp = dp_->partitioned_over_ranks();
        const bool tables = sparse_ != nullptr && !scaler_;
        std::vector<double> sums = {loss_sum};
        if (dense_over_dp) sums.push_back(dense);
        if (tables) {
            sparse_->finish_grads();
            sums.push_back(sparse_->grad_sq_sum());
        }
        sums = dp_->sums_over_ranks(std::move(sums));
        st.loss = sums[0] / loss_div;
        size_t next = 1;
        double sq = grad_sq_over_model_ranks(dense_over_dp ? sums[next++] : dense);
        if (tables) sq += sums[next];
        st.grad_norm = std::sqrt(sq);
    }
    const bool loss_finite = std::isfinite(st.loss);
    const bool finite = loss_finite && std::isfinite(st.grad_norm);
    if (!finite && options_.nan_policy == NanPolicy::kStop && (!scaler_ || !loss_finite))
        stop_on_nonfinite(st.loss);
    if (scaler_) {
        try {
            st.skipped = scaler_->update(!finite);
        } catch (...) {
            finish_step();
            throw;
        }
    } else {
        st.skipped = !finite;
    }
    if (!st.skipped) {
        if (options_.gradient_clipping > 0) {
            float coef = clip_coefficient(st.grad_norm, options_.gradient_clipping);
            if (coef < 1.0f) {
                scale(grads, n, coef);
                if (sparse_) sparse_->scale_grads(coef);
            }
        }
        if (onebit_local) onebit_momentum(grads, n);
        const int64_t update = ++updates_done_;
        last_lr_ = st.lr;
        if (sparse_) sparse_->step(static_cast<float>(st.lr), options_.lr, update);
        state_->step(grads, segments_, static_cast<float>(st.lr), update);
    }
    ++steps_done_;
    if (pruner_ && pruner_->counts_rows() && steps_done_ <= pruner_->options().end_step)
        pruner_->reduce_counts(dp_->comm());  // every step: a checkpoint holds the totals
    const bool pruned = pruner_ && pruner_->due(steps_done_);
    if (pruned) pruner_->update(steps_done_, *state_, *dp_);  // masks after the step's update
    if (!st.skipped || pruned) dp_->after_update();
    finish_step();
    return st;
}

double Engine::grad_sq_local(float* grads, float inv) {
    if (!norm_by_ranges_) {
        if (inv == 1.0f) return dp_->partitioned_local_sum(grads, grad_sq_sum_l2);
        return dp_->partitioned_local_sum(
            grads, [inv](float* g, int64_t m) { return unscale_grad_sq_sum(g, m, inv); });
    }
    // Each part's arena position from its pointer; only the counted ranges add to the sum.
    const int64_t base = dp_->update_range().lo;
    return dp_->partitioned_local_sum(grads, [&](float* g, int64_t m) {
        const int64_t a = base + (g - grads);
        if (inv != 1.0f) unscale_grad_sq_sum(g, m, inv);
        double s = 0;
        for (const Range& r : tp_counted_) {
            const int64_t lo = std::max(a, r.lo), hi = std::min(a + m, r.hi);
            if (lo < hi) s += grad_sq_sum_l2(g + (lo - a), hi - lo);
        }
        return s;
    });
}

double Engine::grad_sq_over_model_ranks(double dp_sum) {
    if (!norm_by_ranges_) return dp_sum;
    double total = dp_sum;
    if (options_.tp.active()) options_.tp.comm->all_reduce(&total, 1, CommType::kF64)->wait();
    if (options_.pp) options_.pp->all_reduce(&total, 1, CommType::kF64)->wait();
    return total;
}

void Engine::sum_whole_grads_over_tp(Tensor& update_grads) {
    const Range u = dp_->update_range();
    const size_t elem = dtype_size(update_grads.dtype());
    auto* base = static_cast<char*>(update_grads.raw());
    for (const Range& r : tp_whole_) {
        const int64_t lo = std::max(u.lo, r.lo), hi = std::min(u.hi, r.hi);
        if (lo >= hi) continue;
        options_.tp.comm
            ->all_reduce(base + static_cast<size_t>(lo - u.lo) * elem, hi - lo,
                         comm_type_of(update_grads.dtype()))
            ->wait();
    }
}

EngineCounters Engine::counters() const {
    EngineCounters c;
    c.steps_done = steps_done_;
    c.updates_done = updates_done_;
    if (scaler_) {
        c.has_scaler = true;
        c.scaler = scaler_->state();
    }
    return c;
}

void Engine::restore(const EngineCounters& c) {
    ZT_CHECK(micro_done_ == 0, "engine: restore in the middle of a step");
    steps_done_ = c.steps_done;
    updates_done_ = c.updates_done;
    if (scaler_ && c.has_scaler) scaler_->restore(c.scaler);
    state_->refresh_compute();
    if (pruner_) pruner_->reload(*state_, *dp_);
    dp_->after_update();
}

std::vector<float> Engine::gather_master() {
    const int64_t n = state_->numel();
    if (const float* v = state_->view(0)) return dp_->gather_update_ranges(v);
    if (n == arena_->padded_numel()) {  // the whole arena here: read it straight into the result
        std::vector<float> whole(static_cast<size_t>(n));
        state_->read(0, 0, n, whole.data());
        return whole;
    }
    std::vector<float> mine(static_cast<size_t>(n));
    state_->read(0, 0, n, mine.data());
    return dp_->gather_update_ranges(mine.data());
}

void Engine::load_master(const float* whole) {
    state_->write(0, 0, state_->numel(), whole + dp_->update_range().lo);
    state_->refresh_compute();
    dp_->after_update();
}

void Engine::finish_step() {
    arena_->zero_grads();
    if (sparse_) sparse_->zero_grads();
    micro_done_ = 0;
    loss_sum_ = 0;
}

void Engine::stop_on_nonfinite(double loss) {
    const int64_t step = steps_done_ + 1;
    const std::string module = tape_.first_nonfinite_module();
    std::string msg;
    if (!std::isfinite(loss)) {
        msg = module.empty()
                  ? str_cat("non-finite loss at step ", step, " (", loss,
                            "): every module output was finite; the loss itself went non-finite")
                  : str_cat("non-finite loss at step ", step, " (", loss,
                            "): the output of module '", module, "' first went non-finite");
    } else {
        std::string param;
        for (Parameter* p : arena_->params())  // gradients held whole (ZeRO stages 0 and 1)
            if (p->grad.defined() && !kernels::all_finite(p->grad)) {
                param = p->name;
                break;
            }
        msg = str_cat("non-finite gradients at step ", step, " (loss ", loss, " was finite",
                      module.empty() ? std::string(", and so was every module output")
                                     : str_cat("; module '", module, "' output went non-finite"),
                      "): the first parameter with a non-finite gradient is '", param, "'");
    }
    finish_step();
    throw Error(ErrorKind::kInternal, __FILE__, __LINE__,
                msg +
                    " (nan_policy stop). Lower the learning rate or check the data and the "
                    "weights; nan_policy \"skip\" skips such steps instead");
}

}  // namespace zt
