// Elementwise kernels (see elementwise.h) over 16-lane vectors (vec16.h): each element is loaded
// to f32, computed, and rounded once on store, so f32, bf16 and f16 share one body. Work is split
// in fixed blocks, so results do not depend on the thread count.
#include "tensor/kernels/elementwise.h"

#include "tensor/kernels/vec16.h"
#include "tensor/threads.h"

namespace zt::kernels {

using namespace vec;

namespace {

constexpr int64_t kParallelMinElems = 1 << 16;  // below this, one thread is faster

// f(i, m) for each vector [i, i + m) of [0, n), blocks in parallel.
template <typename F>
void for_each_block(int64_t n, F f) {
    vec::for_each_block(n, kParallelMinElems, f);
}

template <typename T, typename U>
void add_inplace_t(T* a, const U* b, int64_t n) {
    for_each_block(n, [&](int64_t i, int64_t m) {
        store_part(a + i, load_part(a + i, m) + load_part(b + i, m), m);
    });
}

template <typename T>
void dispatch_add_inplace(T* a, const Tensor& b, int64_t n) {
    switch (b.dtype()) {
        case DType::kF32:
            add_inplace_t(a, b.data<float>(), n);
            break;
        case DType::kBF16:
            add_inplace_t(a, b.data<bf16>(), n);
            break;
        case DType::kF16:
            add_inplace_t(a, b.data<f16>(), n);
            break;
    }
}

template <typename T>
void add_t(const T* a, const T* b, T* y, int64_t n) {
    for_each_block(n, [&](int64_t i, int64_t m) {
        store_part(y + i, load_part(a + i, m) + load_part(b + i, m), m);
    });
}

template <typename T>
void scale_t(T* x, float s, int64_t n) {
    const V16 sv = splat(s);
    for_each_block(n,
                   [&](int64_t i, int64_t m) { store_part(x + i, load_part(x + i, m) * sv, m); });
}

// x - x is 0 for finite x and NaN for NaN and infinities; padded lanes load 0.
template <typename T>
bool all_finite_t(const T* x, int64_t n) {
    const int64_t blocks = (n + kElemBlock - 1) / kElemBlock;
    int bad = 0;
#pragma omp parallel for schedule(static) \
    reduction(|                           \
              : bad) if (n >= parallel_min_elems(kParallelMinElems))
    for (int64_t b = 0; b < blocks; ++b) {
        const int64_t begin = b * kElemBlock, len = n - begin < kElemBlock ? n - begin : kElemBlock;
        V16 acc = zero();
        for_each_vec(len, [&](int64_t j, int64_t m) {
            const V16 v = load_part(x + begin + j, m);
            acc = acc + (v - v);
        });
        bad |= hsum(acc) != 0.0f;  // NaN != 0
    }
    return bad == 0;
}

}  // namespace

void add_inplace(Tensor& a, const Tensor& b) {
    ZT_ASSERT(a.numel() == b.numel() && a.is_contiguous() && b.is_contiguous());
    int64_t n = a.numel();
    switch (a.dtype()) {
        case DType::kF32:
            dispatch_add_inplace(a.data<float>(), b, n);
            break;
        case DType::kBF16:
            dispatch_add_inplace(a.data<bf16>(), b, n);
            break;
        case DType::kF16:
            dispatch_add_inplace(a.data<f16>(), b, n);
            break;
    }
}

void add(const Tensor& a, const Tensor& b, Tensor& y) {
    ZT_ASSERT(a.numel() == b.numel() && a.numel() == y.numel() && a.dtype() == b.dtype() &&
              a.dtype() == y.dtype());
    int64_t n = a.numel();
    switch (a.dtype()) {
        case DType::kF32:
            add_t(a.data<float>(), b.data<float>(), y.data<float>(), n);
            break;
        case DType::kBF16:
            add_t(a.data<bf16>(), b.data<bf16>(), y.data<bf16>(), n);
            break;
        case DType::kF16:
            add_t(a.data<f16>(), b.data<f16>(), y.data<f16>(), n);
            break;
    }
}

void scale_inplace(Tensor& x, float s) {
    ZT_ASSERT(x.is_contiguous());
    int64_t n = x.numel();
    switch (x.dtype()) {
        case DType::kF32:
            scale_t(x.data<float>(), s, n);
            break;
        case DType::kBF16:
            scale_t(x.data<bf16>(), s, n);
            break;
        case DType::kF16:
            scale_t(x.data<f16>(), s, n);
            break;
    }
}

bool all_finite(const Tensor& x) {
    ZT_ASSERT(x.is_contiguous());
    switch (x.dtype()) {
        case DType::kF32:
            return all_finite_t(x.data<float>(), x.numel());
        case DType::kBF16:
            return all_finite_t(x.data<bf16>(), x.numel());
        case DType::kF16:
            return all_finite_t(x.data<f16>(), x.numel());
    }
    return true;
}

void accumulate_f32(float* acc, const void* x, DType dtype, int64_t n) {
    switch (dtype) {
        case DType::kF32:
            add_inplace_t(acc, static_cast<const float*>(x), n);
            break;
        case DType::kBF16:
            add_inplace_t(acc, static_cast<const bf16*>(x), n);
            break;
        case DType::kF16:
            add_inplace_t(acc, static_cast<const f16*>(x), n);
            break;
    }
}

}  // namespace zt::kernels
