// Internal to optim (and its tests and benchmark): the fused Adam/AdamW update of one contiguous
// range on the calling thread. One pass reads p, g, m, v and writes p, m, v and, when asked, the
// compute copy of p (bf16, f16 or f32). Every element goes through the same instruction sequence
// (Note [One compiled update] in segment_partition.h), so how a range is cut into calls (thread
// shares, segments, vector tails) never changes a bit. Two paths: AVX-512 (compiled where the
// target has AVX-512 F, BW and VL) and a portable one; both give the same bits.
#pragma once

#include <cstdint>

#include "optim/adamw.h"
#include "optim/segment_partition.h"  // KernelPath
#include "tensor/dtype.h"

namespace zt::optim_detail {

enum class AdamDecay : uint8_t { kNone, kDecoupled, kL2 };

// The step's scalars, in f32 where PyTorch's ops take them (Note [AdamW op order] in adamw.cpp).
struct AdamCoefs {
    float decay_factor;  // 1 - lr*wd
    float l2;            // wd
    float lerp_coef;     // w or (w - 1): m_new = base + lerp_coef * (g - m), base m or g
    float beta2;
    float one_minus_beta2;
    float bc2_sqrt;
    float eps;
    float neg_step_size;  // -lr / bc1
    bool lerp_from_m;     // base m (|w| < 0.5), else g
};

// One range: p, g, m, v (n,) f32; copy (n,) in copy_dtype, or nullptr for none.
struct AdamRange {
    float* p;
    const float* g;
    float* m;
    float* v;
    void* copy;
    int64_t n;
};

// The scalars of update number `step` (from 1) at learning rate lr.
AdamCoefs adam_coefs(const AdamWOptions& o, float lr, int64_t step);

bool adam_has_avx512_path();

void adam_update_range(const AdamRange& r, AdamDecay decay, DType copy_dtype, const AdamCoefs& c,
                       KernelPath path = KernelPath::kBest);

}  // namespace zt::optim_detail
