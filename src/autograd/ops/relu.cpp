// relu: x -> max(x, 0), same shape and dtype; saves x (Var). backward: dx = dy where x > 0.
#include "tensor/kernels/relu.h"

#include "autograd/ops.h"
#include "autograd/ops/grad_util.h"

namespace zt::ops {

Var relu(Tape& tape, const Var& x) {
    const Tensor& xv = x->value;
    const DType dt = xv.dtype();
    const int64_t n = xv.numel();
    Tensor y = Tensor::empty(tape.pool(), xv.shape(), dt, MemCategory::kActivations);
    ZT_DISPATCH_FLOAT(dt, kernels::relu_forward(xv.data<scalar_t>(), y.data<scalar_t>(), n));
    Var yv = make_var(y, needs_grad(tape, {&x}));
    if (!yv->requires_grad) return yv;
    tape.push("relu", [&tape, x, yv, n, dt] {
        Tensor dy = yv->grad;
        yv->grad = Tensor();
        if (!dy.defined()) return;
        Tensor dx = tape.new_grad(x);
        ZT_DISPATCH_FLOAT(dt, kernels::relu_backward(x->value.data<scalar_t>(), dy.data<scalar_t>(),
                                                     dx.data<scalar_t>(), n));
        Tape::add_grad(x, std::move(dx));
    });
    return yv;
}

}  // namespace zt::ops
