// Helpers shared by op backward functions.
#pragma once

#include <functional>

#include "autograd/variable.h"
#include "tensor/kernels/elementwise.h"

namespace zt::ops {

// Calls fn with an f32 buffer that accumulates into v's parameter gradient: the gradient itself
// when it is f32, else a zeroed f32 scratch added into the (bf16) gradient afterwards.
inline void with_f32_grad(const Var& v, MemoryPool& pool, const std::function<void(float*)>& fn) {
    if (v->grad.dtype() == DType::kF32) {
        fn(v->grad.data<float>());
        return;
    }
    Tensor scratch = Tensor::zeros(pool, v->grad.shape(), DType::kF32, MemCategory::kWorkspace);
    fn(scratch.data<float>());
    kernels::add_inplace(v->grad, scratch);
}

// Runs body<T>() with T the C++ storage type of dtype (f32, bf16 or f16).
#define ZT_DISPATCH_FLOAT(dtype, ...)                                                   \
    do {                                                                                \
        if ((dtype) == ::zt::DType::kF32) {                                             \
            using scalar_t = float;                                                     \
            __VA_ARGS__;                                                                \
        } else if ((dtype) == ::zt::DType::kBF16) {                                     \
            using scalar_t = ::zt::bf16;                                                \
            __VA_ARGS__;                                                                \
        } else if ((dtype) == ::zt::DType::kF16) {                                      \
            using scalar_t = ::zt::f16;                                                 \
            __VA_ARGS__;                                                                \
        } else {                                                                        \
            ZT_ASSERT(false, "op does not support dtype ", ::zt::dtype_name(dtype));    \
        }                                                                               \
    } while (0)

}  // namespace zt::ops
