// fake_quant_rows: x (R, K) -> y (R, K), each row quantized to the format with its own scale
// (tensor/kernels/fake_quant.h); saves x (Var) and each row's clipping range clip x max|row|
// (R) f32. A row split over ranks takes its scale from the whole row's maximum (whole_row_max).
// backward, straight-through: dx = dy where |x| <= the row's range (inside the clipping range),
// 0 elsewhere; with clip 1 no element is outside and dx = dy. A parameter's gradient accumulates.
#include "tensor/kernels/fake_quant.h"

#include <cmath>
#include <vector>

#include "autograd/ops.h"
#include "autograd/ops/grad_util.h"

namespace zt::ops {

namespace {

template <typename T>
void straight_through(const T* x, const T* dy, const float* ranges, int64_t rows, int64_t cols,
                      float* dx_f32, T* dx, bool accumulate) {
    for (int64_t r = 0; r < rows; ++r) {
        const float limit = ranges[r];
        for (int64_t c = 0; c < cols; ++c) {
            const int64_t i = r * cols + c;
            const float g = std::fabs(to_f32(x[i])) <= limit ? to_f32(dy[i]) : 0.0f;
            if (accumulate)
                dx_f32[i] += g;
            else
                dx[i] = from_f32<T>(g);
        }
    }
}

}  // namespace

Var fake_quant_rows(Tape& tape, const Var& x, QuantFormat format, float clip,
                    const RowMaxReduce& whole_row_max) {
    const Tensor& xv = x->value;
    ZT_ASSERT(xv.dim() == 2, "fake_quant_rows: expected a matrix");
    const int64_t rows = xv.shape()[0], cols = xv.shape()[1];
    const DType dt = xv.dtype();
    Tensor y = Tensor::empty(tape.pool(), xv.shape(), dt, MemCategory::kActivations);
    Tensor ranges = Tensor::empty(tape.pool(), {rows}, DType::kF32, MemCategory::kActivations);
    std::vector<float> scales(static_cast<size_t>(rows)), row_max;
    if (whole_row_max) {
        row_max.resize(static_cast<size_t>(rows));
        ZT_DISPATCH_FLOAT(dt, kernels::row_absmax(xv.data<scalar_t>(), rows, cols, row_max.data()));
        whole_row_max(row_max);
    }
    ZT_DISPATCH_FLOAT(
        dt, kernels::fake_quant_rows(xv.data<scalar_t>(), y.data<scalar_t>(), scales.data(), rows,
                                     cols, format, clip, ranges.data<float>(),
                                     whole_row_max ? row_max.data() : nullptr));
    Var yv = make_var(y, needs_grad(tape, {&x}));
    if (!yv->requires_grad) return yv;
    tape.push("fake_quant", [&tape, x, yv, ranges, rows, cols, dt] {
        Tensor dy = yv->grad;
        yv->grad = Tensor();
        if (!dy.defined()) return;
        if (x->is_param) {  // accumulate into the (possibly f32) parameter gradient
            tape.grad_zeros(x);
            with_f32_grad(x, tape.pool(), [&](float* g) {
                ZT_DISPATCH_FLOAT(dt, straight_through<scalar_t>(
                                          x->value.data<scalar_t>(), dy.data<scalar_t>(),
                                          ranges.data<float>(), rows, cols, g, nullptr, true));
            });
            return;
        }
        Tensor dx = tape.new_grad(x);
        ZT_DISPATCH_FLOAT(dt,
                          straight_through<scalar_t>(x->value.data<scalar_t>(), dy.data<scalar_t>(),
                                                     ranges.data<float>(), rows, cols, nullptr,
                                                     dx.data<scalar_t>(), false));
        Tape::add_grad(x, std::move(dx));
    });
    return yv;
}

}  // namespace zt::ops
