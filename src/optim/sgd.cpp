#include "optim/sgd.h"

#include <algorithm>

#include "optim/segment_partition.h"
#include "tensor/threads.h"

namespace zt {

// PyTorch's single-tensor SGD, scalars (double) turned into f32 where a tensor op takes them:
//   g = g + f32(wd) * p                         (decay segments)
//   buf = g on the first step, else buf = buf * f32(mu) + g
//   d = nesterov ? g + f32(mu) * buf : buf       (no momentum: d = g)
//   p = p + f32(-lr) * d
// No FMA, one compiled instance for every element (Note [One compiled update] in
// segment_partition.h), so the bits do not depend on the thread count.

namespace {

struct SgdCoefs {
    float l2;
    float momentum;
    float neg_lr;
};

// p, g, buf: (nblocks * kBlock,) f32; buf unused when !kMomentum. Note [One compiled update].
template <bool kDecay, bool kMomentum, bool kFirst, bool kNesterov>
ZT_OPTIM_KERNEL void sgd_blocks(float* __restrict p, const float* __restrict g,
                                float* __restrict buf, int64_t nblocks, const SgdCoefs& c) {
    ZT_OPTIM_NO_CONTRACT
    using optim_detail::kBlock;
    const SgdCoefs k = c;
    for (int64_t b = 0; b < nblocks * kBlock; b += kBlock) {
#pragma omp simd
        for (int j = 0; j < kBlock; ++j) {
            const float pi = p[b + j];
            float d = g[b + j];
            if constexpr (kDecay) d = d + k.l2 * pi;
            if constexpr (kMomentum) {
                float mb = d;
                if constexpr (!kFirst) mb = buf[b + j] * k.momentum + d;
                buf[b + j] = mb;
                d = kNesterov ? d + k.momentum * mb : mb;
            }
            p[b + j] = pi + k.neg_lr * d;
        }
    }
}

template <bool kDecay, bool kMomentum, bool kFirst, bool kNesterov>
void sgd_range(float* p, const float* g, float* buf, int64_t n, const SgdCoefs& c) {
    using optim_detail::kBlock;
    const int64_t full = n / kBlock;
    if (full > 0) sgd_blocks<kDecay, kMomentum, kFirst, kNesterov>(p, g, buf, full, c);
    const int64_t off = full * kBlock;
    const int64_t rest = n - off;
    if (rest == 0) return;
    alignas(64) float pb[kBlock] = {}, gb[kBlock] = {}, bb[kBlock] = {};
    std::copy_n(p + off, rest, pb);
    std::copy_n(g + off, rest, gb);
    if (kMomentum && !kFirst) std::copy_n(buf + off, rest, bb);
    sgd_blocks<kDecay, kMomentum, kFirst, kNesterov>(pb, gb, bb, 1, c);
    std::copy_n(pb, rest, p + off);
    if (kMomentum) std::copy_n(bb, rest, buf + off);
}

template <bool kDecay>
void sgd_dispatch(float* p, const float* g, float* buf, int64_t n, const SgdCoefs& c, bool momentum,
                  bool first, bool nesterov) {
    if (!momentum) return sgd_range<kDecay, false, false, false>(p, g, buf, n, c);
    if (first) {
        if (nesterov) return sgd_range<kDecay, true, true, true>(p, g, buf, n, c);
        return sgd_range<kDecay, true, true, false>(p, g, buf, n, c);
    }
    if (nesterov) return sgd_range<kDecay, true, false, true>(p, g, buf, n, c);
    sgd_range<kDecay, true, false, false>(p, g, buf, n, c);
}

}  // namespace

Sgd::Sgd(const SgdOptions& options) : options_(options) {
    const SgdOptions& o = options_;
    ZT_CHECK(o.momentum >= 0.0, "optimizer.params.momentum: expected a value >= 0, got ",
             o.momentum);
    ZT_CHECK(o.weight_decay >= 0.0, "optimizer.params.weight_decay: expected a value >= 0, got ",
             o.weight_decay);
    ZT_CHECK(!o.nesterov || o.momentum > 0.0,
             "optimizer.params.nesterov: needs momentum > 0, got momentum ", o.momentum,
             "; set a momentum or turn nesterov off");
}

std::vector<std::string> Sgd::state_names() const {
    if (options_.momentum == 0.0) return {};
    return {"momentum_buffer"};
}

void Sgd::step_on(float* params, const float* grads, float* const* state, int64_t numel,
                  std::span<const OptimSegment> segments, float lr, int64_t step,
                  const ComputeCopy& copy) const {
    ZT_ASSERT(step >= 1, "SGD steps count from 1, got ", step);
    optim_detail::check_segments(segments, numel);
    const SgdOptions& o = options_;
    const SgdCoefs c{static_cast<float>(o.weight_decay), static_cast<float>(o.momentum),
                     static_cast<float>(-static_cast<double>(lr))};
    const bool momentum = o.momentum != 0.0;
    const bool first = step == 1;
    const bool any_decay = o.weight_decay != 0.0;
    float* buf = momentum ? state[0] : nullptr;
    const int64_t n = numel;
#pragma omp parallel if (n >= parallel_min_elems(optim_detail::kParallelMinNumel))
    optim_detail::for_each_share_part(segments, n, [&](int64_t b, int64_t e, bool decay) {
        float* bb = buf ? buf + b : nullptr;
        if (decay && any_decay)
            sgd_dispatch<true>(params + b, grads + b, bb, e - b, c, momentum, first, o.nesterov);
        else
            sgd_dispatch<false>(params + b, grads + b, bb, e - b, c, momentum, first, o.nesterov);
        optim_detail::write_compute_copy(params, copy, b, e);
    });
}

}  // namespace zt
