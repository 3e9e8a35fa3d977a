#include "optim/adamw.h"

#include <algorithm>
#include <cmath>

#include "optim/adam_kernel.h"
#include "optim/segment_partition.h"
#include "tensor/threads.h"

namespace zt {

// Note [AdamW op order]
// PyTorch's single-tensor AdamW (the CPU default), with Python scalars (double) turned into f32
// where a tensor op takes them:
//   p = p * f32(1 - lr*wd)                                  (adam_w_mode, decay segments)
//   g = g + f32(wd) * p                                     (classic Adam, decay segments)
//   m = lerp(m, g, w),  w = f32(1 - beta1)                  m + w*(g - m) when |w| < 0.5,
//                                                           else g - (g - m)*(1 - w)
//   v = v * f32(beta2);  v = v + (f32(1 - beta2) * g) * g   (mul_, then addcmul_)
//   denom = sqrt(v) / f32(sqrt(bc2)) + f32(eps)
//   p = p + (f32(-lr/bc1) * m) / denom                      (addcdiv_)
// with bc1 = 1 - beta1^t, bc2 = 1 - beta2^t in double. The lerp is not b1*m + (1-b1)*g: it
// differs from it by an ulp once m is nonzero. No step uses FMA, and every element goes through
// the same instruction sequence (Note [One compiled update]), so any two thread counts give the
// same bits. The compute copy, when asked for, is the updated p converted (Note [Fused compute
// copy] in adam_kernel.cpp).

AdamW::AdamW(const AdamWOptions& options) : options_(options) {
    const AdamWOptions& o = options_;
    ZT_CHECK(o.beta1 >= 0.0 && o.beta1 < 1.0,
             "optimizer.params.betas[0]: expected a value in [0, 1), got ", o.beta1);
    ZT_CHECK(o.beta2 >= 0.0 && o.beta2 < 1.0,
             "optimizer.params.betas[1]: expected a value in [0, 1), got ", o.beta2);
    ZT_CHECK(o.eps >= 0.0, "optimizer.params.eps: expected a value >= 0, got ", o.eps);
    ZT_CHECK(o.weight_decay >= 0.0, "optimizer.params.weight_decay: expected a value >= 0, got ",
             o.weight_decay);
}

void adamw_step(const AdamWOptions& options, float* params, const float* grads, float* exp_avg,
                float* exp_avg_sq, int64_t numel, std::span<const OptimSegment> segments, float lr,
                int64_t step, const ComputeCopy& copy) {
    using optim_detail::AdamDecay;
    ZT_ASSERT(step >= 1, "AdamW steps count from 1, got ", step);
    optim_detail::check_segments(segments, numel);
    const optim_detail::AdamCoefs c = optim_detail::adam_coefs(options, lr, step);
    const AdamDecay decay_mode = options.weight_decay == 0.0 ? AdamDecay::kNone
                                 : options.adam_w_mode       ? AdamDecay::kDecoupled
                                                             : AdamDecay::kL2;
    char* copy_base = static_cast<char*>(copy.data);
    const size_t copy_es = dtype_size(copy.dtype);
#pragma omp parallel if (numel >= parallel_min_elems(optim_detail::kParallelMinNumel))
    optim_detail::for_each_share_part(segments, numel, [&](int64_t b, int64_t e, bool decay) {
        const optim_detail::AdamRange r{params + b,
                                        grads + b,
                                        exp_avg + b,
                                        exp_avg_sq + b,
                                        copy_base ? copy_base + b * copy_es : nullptr,
                                        e - b};
        optim_detail::adam_update_range(r, decay ? decay_mode : AdamDecay::kNone, copy.dtype, c);
    });
}

void AdamW::step_on(float* params, const float* grads, float* const* state, int64_t numel,
                    std::span<const OptimSegment> segments, float lr, int64_t step,
                    const ComputeCopy& copy) const {
    adamw_step(options_, params, grads, state[0], state[1], numel, segments, lr, step, copy);
}

}  // namespace zt
