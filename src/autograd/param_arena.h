// Flat parameter arenas (DESIGN.md, Memory model): f32 master weights, gradients (f32, or bf16 with
// grad_accum_dtype bf16) and, in mixed precision, a bf16/f16 compute copy, each one contiguous
// buffer in parameter registration order, padded to a multiple of `pad_to` elements (the dp rank
// count), so a shard is an (offset, size) range and a checkpoint is a contiguous write.
//
// Under ZeRO a buffer may hold only this rank's owned range [owned_lo, owned_hi) of the padded
// arena (parallel/zero_layout.h says which, per stage). A parameter's views (master, grad, var's
// value) exist only for buffers held whole; the parallel layer binds the others per use.
#pragma once

#include <cstdint>
#include <vector>

#include "autograd/module.h"

namespace zt {

struct ArenaOptions {
    DType compute_dtype = DType::kF32;
    DType grad_dtype = DType::kF32;
    int64_t pad_to = 1;
    int64_t owned_lo = 0, owned_hi = -1;  // this rank's range; -1: the whole arena
    bool full_master = true;   // false: master holds the owned range only
    bool full_grads = true;    // false: grads hold the owned range only
    bool full_compute = true;  // false: the compute copy holds the owned range only
    // false: no master weights here (an offload tier holds them; offload/update_state.h); the
    // compute copy is then its own buffer even in f32, and init_weights leaves it to the tier.
    bool hold_master = true;
    // false: no compute copy here either (ZeRO-3's owned compute weights on a parameter tier,
    // offload/param_tier.h); only with full_compute false.
    bool hold_compute = true;
    // Where the gradients live; null: the arena's pool. Under offload at ZeRO stages 2-3, a pool
    // of host memory outside the device budget (Note [Gradients on the host], runtime/engine.cpp).
    MemoryPool* grads_pool = nullptr;
};

class ParamArena {
public:
    ParamArena(MemoryPool& pool, std::vector<Parameter*> params, ArenaOptions options);
    ParamArena(const ParamArena&) = delete;
    ParamArena& operator=(const ParamArena&) = delete;

    // Fills the held master weights from each parameter's init, keyed by (seed, name, element
    // index), so every layout starts from the same weights.
    void init_weights(uint64_t seed);
    // The initial values of arena elements [lo, lo + n) (padding: zero), as init_weights sets
    // them: for a tier that holds the master weights elsewhere.
    void fill_init(uint64_t seed, int64_t lo, int64_t n, float* out) const;
    // Copies held master weights into the compute copy where both hold them (no-op when the
    // compute copy is the master, in f32).
    void sync_compute();
    void zero_grads();

    int64_t numel() const { return numel_; }         // sum of parameter sizes
    int64_t padded_numel() const { return padded_; } // arena length
    int64_t owned_lo() const { return lo_; }
    int64_t owned_hi() const { return hi_; }
    const std::vector<Parameter*>& params() const { return params_; }
    Parameter* find(const std::string& name) const;

    Tensor& master() { return master_; }   // f32: the padded arena, or the owned range; undefined
                                           // without hold_master
    Tensor& grads() { return grads_; }     // grad dtype: the padded arena, or the owned range
    Tensor& compute() { return compute_; } // compute dtype; aliases master when f32 and alike
    // Views of the owned range of each buffer, however much of the arena it holds.
    Tensor master_owned() { return owned_view(master_, options_.full_master); }
    Tensor grads_owned() { return owned_view(grads_, options_.full_grads); }
    Tensor compute_owned() { return owned_view(compute_, options_.full_compute); }
    const ArenaOptions& options() const { return options_; }

private:
    Tensor owned_view(Tensor& t, bool full) const;

    std::vector<Parameter*> params_;
    ArenaOptions options_;
    int64_t numel_ = 0;
    int64_t padded_ = 0;
    int64_t lo_ = 0, hi_ = 0;
    Tensor master_, grads_, compute_;
};

}  // namespace zt
