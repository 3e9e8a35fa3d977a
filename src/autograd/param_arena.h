// Flat parameter arenas (DESIGN.md, Memory model): f32 master weights, gradients (f32, or bf16 with
// grad_accum_dtype bf16) and, in mixed precision, a bf16 compute copy, each one contiguous buffer in
// parameter registration order, padded to a multiple of `pad_to` elements (the dp rank count), so a
// shard is an (offset, size) range and a checkpoint is a contiguous write.
#pragma once

#include <cstdint>
#include <vector>

#include "autograd/module.h"

namespace zt {

struct ArenaOptions {
    DType compute_dtype = DType::kF32;
    DType grad_dtype = DType::kF32;
    int64_t pad_to = 1;
};

class ParamArena {
public:
    ParamArena(MemoryPool& pool, std::vector<Parameter*> params, ArenaOptions options);
    ParamArena(const ParamArena&) = delete;
    ParamArena& operator=(const ParamArena&) = delete;

    // Fills master weights from each parameter's init, keyed by (seed, name, element index).
    void init_weights(uint64_t seed);
    // Copies master weights into the compute copy (no-op in f32, where they are the same buffer).
    void sync_compute();
    void zero_grads();

    int64_t numel() const { return numel_; }         // sum of parameter sizes
    int64_t padded_numel() const { return padded_; } // arena length
    const std::vector<Parameter*>& params() const { return params_; }
    Parameter* find(const std::string& name) const;

    Tensor& master() { return master_; }   // (padded) f32
    Tensor& grads() { return grads_; }     // (padded) grad dtype
    Tensor& compute() { return compute_; } // (padded) compute dtype; aliases master in f32
    const ArenaOptions& options() const { return options_; }

private:
    std::vector<Parameter*> params_;
    ArenaOptions options_;
    int64_t numel_ = 0;
    int64_t padded_ = 0;
    Tensor master_, grads_, compute_;
};

}  // namespace zt
