// Internal to optim: splits an optimizer's flat range into static per-thread shares and walks the
// segments that fall into the calling thread's share. Elementwise updates computed this way give
// the same bits for any thread count, since no element's result depends on who computes it.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <span>

#include "optim/optimizer.h"
#include "tensor/dtype.h"
#include "util/error.h"

namespace zt::optim_detail {

constexpr int64_t kParallelMinNumel = 1 << 15;  // elements; below this one thread is faster
constexpr int64_t kShareGrain = 16;             // elements; one 64-byte cache line of f32
constexpr int kBlock = 16;                      // elements per kernel block; one AVX-512 vector

// Note [One compiled update]
// GCC fuses a*b + c into an FMA by default (even with -std=c++20), and may fuse differently in
// a loop's vector body and its scalar remainder; which elements land in a remainder depends on
// the thread shares, so the bits could depend on the thread count. Kernels therefore run every
// element through one compiled instance: a non-inlined function over whole blocks of kBlock
// elements (a remainder goes through it in a zero-padded block), compiled without contraction so
// the ops round one by one in the order written, like PyTorch's scalar code.
// ZT_OPTIM_KERNEL goes before such a function, ZT_OPTIM_NO_CONTRACT first in its body.
#if defined(__clang__)
#define ZT_OPTIM_KERNEL __attribute__((noinline))
#define ZT_OPTIM_NO_CONTRACT _Pragma("clang fp contract(off)")
#else
#define ZT_OPTIM_KERNEL __attribute__((noinline, optimize("fp-contract=off")))
#define ZT_OPTIM_NO_CONTRACT
#endif

inline void check_segments(std::span<const OptimSegment> segments, int64_t numel) {
    for (const OptimSegment& s : segments)
        ZT_ASSERT(s.offset >= 0 && s.numel >= 0 && s.offset + s.numel <= numel, "segment (",
                  s.offset, ", ", s.numel, ") outside the optimizer range of ", numel, " elements");
}

// Calls fn(begin, end, decay) for each part of a segment inside this thread's share of
// [0, numel). Call from inside an OpenMP parallel region (or outside one: one share, all of it).
template <typename Fn>
void for_each_share_part(std::span<const OptimSegment> segments, int64_t numel, Fn&& fn) {
    const int64_t t = omp_get_thread_num();
    const int64_t nt = omp_get_num_threads();
    const int64_t grains = (numel + kShareGrain - 1) / kShareGrain;
    const int64_t lo = std::min(numel, grains * t / nt * kShareGrain);
    const int64_t hi = std::min(numel, grains * (t + 1) / nt * kShareGrain);
    for (const OptimSegment& s : segments) {
        const int64_t b = std::max(s.offset, lo);
        const int64_t e = std::min(s.offset + s.numel, hi);
        if (b < e) fn(b, e, s.decay);
    }
}

// Writes params [b, e) into the compute copy (when there is one) with convert(): for an optimizer
// whose kernel does not fuse the copy (Sgd), a second pass over the part it just updated.
inline void write_compute_copy(const float* params, const ComputeCopy& copy, int64_t b, int64_t e) {
    if (copy.data == nullptr || b >= e) return;
    char* dst = static_cast<char*>(copy.data) + b * static_cast<int64_t>(dtype_size(copy.dtype));
    convert(params + b, DType::kF32, dst, copy.dtype, static_cast<size_t>(e - b));
}

}  // namespace zt::optim_detail
