#include "autograd/param_arena.h"

#include <algorithm>
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
    lo_ = options_.owned_lo;
    hi_ = options_.owned_hi < 0 ? padded_ : options_.owned_hi;
    ZT_ASSERT(0 <= lo_ && lo_ <= hi_ && hi_ <= padded_, "owned range [", lo_, ", ", hi_,
              ") outside the arena of ", padded_);
    const int64_t owned = hi_ - lo_;
    if (options_.hold_master)
        master_ = Tensor::zeros(pool, {options_.full_master ? padded_ : owned}, DType::kF32,
                                MemCategory::kParams);
    grads_ = Tensor::zeros(options_.grads_pool ? *options_.grads_pool : pool,
                           {options_.full_grads ? padded_ : owned}, options_.grad_dtype,
                           MemCategory::kGrads);
    const bool alias = options_.hold_master && options_.compute_dtype == DType::kF32 &&
                       options_.full_compute == options_.full_master;
    ZT_ASSERT(options_.hold_compute || (!options_.full_compute && !options_.hold_master),
              "an arena without its compute copy holds neither it whole nor a master");
    if (options_.hold_compute)
        compute_ = alias ? master_
                         : Tensor::zeros(pool, {options_.full_compute ? padded_ : owned},
                                         options_.compute_dtype, MemCategory::kParams);
    for (Parameter* p : params_) {
        p->master = options_.full_master && options_.hold_master
                        ? Tensor::view_of(master_.storage(), p->offset, p->shape, DType::kF32)
                        : Tensor();
        p->grad = options_.full_grads ? Tensor::view_of(grads_.storage(), p->offset, p->shape,
                                                        options_.grad_dtype)
                                      : Tensor();
        p->var = make_var(options_.full_compute
                              ? Tensor::view_of(compute_.storage(), p->offset, p->shape,
                                                options_.compute_dtype)
                              : Tensor(),
                          true);
        p->var->is_param = true;
        p->var->grad = p->grad;
    }
}

Tensor ParamArena::owned_view(Tensor& t, bool full) const {
    return Tensor::view_of(t.storage(), full ? lo_ : 0, {hi_ - lo_}, t.dtype());
}

float param_init_value(const ParamInit& init, uint64_t seed, uint64_t stream, int64_t index) {
    const auto i = static_cast<uint64_t>(index);
    switch (init.kind) {
        case ParamInit::Kind::kZeros: return 0.0f;
        case ParamInit::Kind::kOnes: return 1.0f;
        case ParamInit::Kind::kNormal:
            return static_cast<float>(init.std * normal01(seed, stream, i));
        case ParamInit::Kind::kUniform:
            return static_cast<float>(init.std * (2.0 * uniform01(seed, stream, i) - 1.0));
    }
    return 0.0f;
}

void ParamArena::fill_init(uint64_t seed, int64_t lo, int64_t n, float* out) const {
    // Element i of the arena is element i - offset of its parameter; each layout fills the
    // elements it holds with the values one process would have.
    ZT_ASSERT(lo >= 0 && n >= 0 && lo + n <= padded_);
    float* base = out - lo;  // arena index -> pointer ([lo, lo + n) only)
    std::memset(out, 0, static_cast<size_t>(n) * sizeof(float));
    for (Parameter* p : params_) {
        const int64_t b = std::max(lo, p->offset);
        const int64_t e = std::min(lo + n, p->offset + p->numel());
        if (b >= e || p->init.kind == ParamInit::Kind::kZeros) continue;
        const int64_t off = p->offset;
        const uint64_t stream = hash_string(p->name);
        const ParamInit init = p->init;
        const Parameter& param = *p;
#pragma omp parallel for schedule(static)
        for (int64_t i = b; i < e; ++i)
            base[i] = param_init_value(init, seed, stream, param.global_index(i - off));
    }
}

void ParamArena::init_weights(uint64_t seed) {
    if (!options_.hold_master) return;  // the tier fills its master from fill_init
    const int64_t held_lo = options_.full_master ? 0 : lo_;
    const int64_t held_hi = options_.full_master ? padded_ : hi_;
    fill_init(seed, held_lo, held_hi - held_lo, master_.data<float>());
    sync_compute();
}

void ParamArena::sync_compute() {
    if (!options_.hold_master || compute_.storage() == master_.storage()) return;
    if (options_.full_master == options_.full_compute) {
        compute_.copy_from(master_);
    } else {  // master holds the owned range, the compute copy the whole arena
        ZT_ASSERT(!options_.full_master && options_.full_compute);
        Tensor dst = compute_owned();
        dst.copy_from(master_);
    }
}

void ParamArena::zero_grads() { grads_.zero(); }

Parameter* ParamArena::find(const std::string& name) const {
    for (Parameter* p : params_)
        if (p->name == name) return p;
    return nullptr;
}

}  // namespace zt
