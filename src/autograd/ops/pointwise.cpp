// Pointwise ops. gelu: x -> y, saves x. add: (a, b) -> a + b, saves nothing (so its value may be
// elided: Note [Recompute early stop]).
#include "autograd/ops.h"
#include "autograd/ops/grad_util.h"
#include "tensor/kernels/gelu.h"

namespace zt::ops {

Var gelu(Tape& tape, const Var& x) {
    const Tensor& xv = x->value;
    const DType dt = xv.dtype();
    const int64_t n = xv.numel();
    Tensor y = Tensor::empty(tape.pool(), xv.shape(), dt, MemCategory::kActivations);
    ZT_DISPATCH_FLOAT(dt, kernels::gelu_forward(xv.data<scalar_t>(), y.data<scalar_t>(), n));
    Var yv = make_var(y, needs_grad(tape, {&x}));
    if (!yv->requires_grad) return yv;
    tape.push("gelu", [&tape, x, yv, n, dt] {
        Tensor dy = yv->grad;
        yv->grad = Tensor();
        if (!dy.defined()) return;
        Tensor dx = tape.new_grad(x);
        ZT_DISPATCH_FLOAT(dt, kernels::gelu_backward(x->value.data<scalar_t>(),
                                                     dy.data<scalar_t>(), dx.data<scalar_t>(), n));
        Tape::add_grad(x, std::move(dx));
    });
    return yv;
}

Var add(Tape& tape, const Var& a, const Var& b, OutputUse use) {
    Tensor y;
    if (use == OutputUse::kRead || !tape.recording()) {  // Note [Recompute early stop]
        ZT_ASSERT(a->value.shape() == b->value.shape(), "add: ", shape_str(a->value.shape()),
                  " + ", shape_str(b->value.shape()));
        y = Tensor::empty(tape.pool(), a->value.shape(), a->value.dtype(),
                          MemCategory::kActivations);
        kernels::add(a->value, b->value, y);
    }
    Var yv = make_var(y, needs_grad(tape, {&a, &b}));
    if (!yv->requires_grad) return yv;
    tape.push("add", [a, b, yv] {
        Tensor dy = yv->grad;
        yv->grad = Tensor();
        if (!dy.defined()) return;
        Tape::add_grad(a, dy);  // both share dy; Tape::add_grad copies before writing into it
        Tape::add_grad(b, dy);
    });
    return yv;
}

}  // namespace zt::ops
