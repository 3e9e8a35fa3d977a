#include "tensor/kernels/elementwise.h"

#include <cmath>

namespace zt::kernels {

namespace {
template <typename T, typename U>
void add_inplace_t(T* a, const U* b, int64_t n) {
#pragma omp parallel for schedule(static) if (n > (1 << 16))
    for (int64_t i = 0; i < n; ++i) a[i] = from_f32<T>(to_f32(a[i]) + to_f32(b[i]));
}

template <typename T>
void dispatch_add_inplace(T* a, const Tensor& b, int64_t n) {
    switch (b.dtype()) {
        case DType::kF32: add_inplace_t(a, b.data<float>(), n); break;
        case DType::kBF16: add_inplace_t(a, b.data<bf16>(), n); break;
        case DType::kF16: add_inplace_t(a, b.data<f16>(), n); break;
    }
}

template <typename T>
void add_t(const T* a, const T* b, T* y, int64_t n) {
#pragma omp parallel for schedule(static) if (n > (1 << 16))
    for (int64_t i = 0; i < n; ++i) y[i] = from_f32<T>(to_f32(a[i]) + to_f32(b[i]));
}

template <typename T>
void scale_t(T* x, float s, int64_t n) {
#pragma omp parallel for schedule(static) if (n > (1 << 16))
    for (int64_t i = 0; i < n; ++i) x[i] = from_f32<T>(to_f32(x[i]) * s);
}
}  // namespace

void add_inplace(Tensor& a, const Tensor& b) {
    ZT_ASSERT(a.numel() == b.numel() && a.is_contiguous() && b.is_contiguous());
    int64_t n = a.numel();
    switch (a.dtype()) {
        case DType::kF32: dispatch_add_inplace(a.data<float>(), b, n); break;
        case DType::kBF16: dispatch_add_inplace(a.data<bf16>(), b, n); break;
        case DType::kF16: dispatch_add_inplace(a.data<f16>(), b, n); break;
    }
}

void add(const Tensor& a, const Tensor& b, Tensor& y) {
    ZT_ASSERT(a.numel() == b.numel() && a.numel() == y.numel() && a.dtype() == b.dtype() &&
              a.dtype() == y.dtype());
    int64_t n = a.numel();
    switch (a.dtype()) {
        case DType::kF32: add_t(a.data<float>(), b.data<float>(), y.data<float>(), n); break;
        case DType::kBF16: add_t(a.data<bf16>(), b.data<bf16>(), y.data<bf16>(), n); break;
        case DType::kF16: add_t(a.data<f16>(), b.data<f16>(), y.data<f16>(), n); break;
    }
}

void scale_inplace(Tensor& x, float s) {
    int64_t n = x.numel();
    switch (x.dtype()) {
        case DType::kF32: scale_t(x.data<float>(), s, n); break;
        case DType::kBF16: scale_t(x.data<bf16>(), s, n); break;
        case DType::kF16: scale_t(x.data<f16>(), s, n); break;
    }
}

namespace {
template <typename T>
bool all_finite_t(const T* x, int64_t n) {
    int bad = 0;
#pragma omp parallel for schedule(static) reduction(| : bad) if (n > (1 << 16))
    for (int64_t i = 0; i < n; ++i) bad |= !std::isfinite(to_f32(x[i]));
    return bad == 0;
}
}  // namespace

bool all_finite(const Tensor& x) {
    ZT_ASSERT(x.is_contiguous());
    switch (x.dtype()) {
        case DType::kF32: return all_finite_t(x.data<float>(), x.numel());
        case DType::kBF16: return all_finite_t(x.data<bf16>(), x.numel());
        case DType::kF16: return all_finite_t(x.data<f16>(), x.numel());
    }
    return true;
}

void accumulate_f32(float* acc, const void* x, DType dtype, int64_t n) {
    switch (dtype) {
        case DType::kF32: add_inplace_t(acc, static_cast<const float*>(x), n); break;
        case DType::kBF16: add_inplace_t(acc, static_cast<const bf16*>(x), n); break;
        case DType::kF16: add_inplace_t(acc, static_cast<const f16*>(x), n); break;
    }
}

}  // namespace zt::kernels
