#include "autograd/param_arena.h"

#include <cstring>

#include "util/random.h"

namespace zt {

ParamArena::ParamArena(MemoryPool& pool, std::vector<Parameter*> params, ArenaOptions options)
    : params_(std::move(params)), options_(options) {
    ZT_ASSERT(options_.pad_to >= 1);
    for (Parameter* p : params_) {
        p->offset = numel_;
        numel_ += p->numel();
    }
    padded_ = (numel_ + options_.pad_to - 1) / options_.pad_to * options_.pad_to;
    master_ = Tensor::zeros(pool, {padded_}, DType::kF32, MemCategory::kParams);
    grads_ = Tensor::zeros(pool, {padded_}, options_.grad_dtype, MemCategory::kGrads);
    compute_ = options_.compute_dtype == DType::kF32
                   ? master_
                   : Tensor::zeros(pool, {padded_}, options_.compute_dtype, MemCategory::kParams);
    for (Parameter* p : params_) {
        p->master = Tensor::view_of(master_.storage(), p->offset, p->shape, DType::kF32);
        p->grad = Tensor::view_of(grads_.storage(), p->offset, p->shape, options_.grad_dtype);
        p->var = make_var(
            Tensor::view_of(compute_.storage(), p->offset, p->shape, options_.compute_dtype), true);
        p->var->is_param = true;
        p->var->grad = p->grad;
    }
}

void ParamArena::init_weights(uint64_t seed) {
    for (Parameter* p : params_) {
        float* w = p->master.data<float>();
        int64_t n = p->numel();
        uint64_t stream = hash_string(p->name);
        switch (p->init.kind) {
            case ParamInit::Kind::kZeros: std::memset(w, 0, n * sizeof(float)); break;
            case ParamInit::Kind::kOnes:
                for (int64_t i = 0; i < n; ++i) w[i] = 1.0f;
                break;
            case ParamInit::Kind::kNormal:
#pragma omp parallel for schedule(static)
                for (int64_t i = 0; i < n; ++i)
                    w[i] = static_cast<float>(p->init.std * normal01(seed, stream, i));
                break;
        }
    }
    sync_compute();
}

void ParamArena::sync_compute() {
    if (options_.compute_dtype == DType::kF32) return;
    compute_.copy_from(master_);
}

void ParamArena::zero_grads() { grads_.zero(); }

Parameter* ParamArena::find(const std::string& name) const {
    for (Parameter* p : params_)
        if (p->name == name) return p;
    return nullptr;
}

}  // namespace zt
