// layernorm: x: (N, C), gamma, beta: (C) -> y: (N, C); saves x, mean, rstd: (N) f32.
#include "autograd/ops.h"
#include "autograd/ops/grad_util.h"
#include "tensor/kernels/layernorm.h"

namespace zt::ops {

Var layernorm(Tape& tape, const Var& x, const Var& gamma, const Var& beta, float eps) {
    const Tensor& xv = x->value;
    const int64_t C = xv.size(-1), N = xv.numel() / C;
    const DType dt = xv.dtype();
    Tensor y = Tensor::empty(tape.pool(), xv.shape(), dt, MemCategory::kActivations);
    Tensor stats = Tensor::empty(tape.pool(), {2, N}, DType::kF32, MemCategory::kActivations);
    float* mean = stats.data<float>();
    float* rstd = mean + N;
    ZT_DISPATCH_FLOAT(dt, kernels::layernorm_forward(
                              xv.data<scalar_t>(), gamma->value.data<scalar_t>(),
                              beta->value.data<scalar_t>(), y.data<scalar_t>(), mean, rstd, N, C,
                              eps));
    Var yv = make_var(y, needs_grad(tape, {&x, &gamma, &beta}));
    if (!yv->requires_grad) return yv;
    tape.push("layernorm", [&tape, x, gamma, beta, yv, stats, N, C, dt] {
        Tensor dy = yv->grad;
        yv->grad = Tensor();
        if (!dy.defined()) return;
        Tensor dx = tape.new_grad(x);
        const float* mean = stats.data<float>();
        tape.grad_zeros(gamma);
        tape.grad_zeros(beta);
        with_f32_grad(gamma, tape.pool(), [&](float* dg) {
            with_f32_grad(beta, tape.pool(), [&](float* db) {
                ZT_DISPATCH_FLOAT(dt, kernels::layernorm_backward(
                                          dy.data<scalar_t>(), x->value.data<scalar_t>(),
                                          gamma->value.data<scalar_t>(), mean, mean + N,
                                          dx.data<scalar_t>(), dg, db, N, C));
            });
        });
        Tape::add_grad(x, std::move(dx));
    });
    return yv;
}

}  // namespace zt::ops
