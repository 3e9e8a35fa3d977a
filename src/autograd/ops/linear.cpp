// linear: y = x W^T + b (b added in the GEMM epilogue).  x: (N, in), W: (out, in), b: (out) -> y: (N, out); saves x, W (Vars).
// backward: dx = dy W (written); dW += dy^T x; db += colsum(dy), deferred to the weight-gradient
// pass of a zero-bubble pipeline when the tape has a sink (Tape::set_deferred).
#include "autograd/ops.h"
#include "autograd/ops/grad_util.h"
#include "tensor/gemm.h"
#include "tensor/kernels/bias.h"

namespace zt::ops {

Var linear(Tape& tape, const Var& x, const Var& w, const Var* b, OutputUse use) {
    const Tensor& xv = x->value;
    const Tensor& wv = w->value;
    ZT_ASSERT(wv.dim() == 2 && xv.size(-1) == wv.size(1), "linear: x ", shape_str(xv.shape()),
              " against W ", shape_str(wv.shape()));
    ZT_ASSERT(xv.dtype() == wv.dtype(), "linear: x and W dtypes differ");
    const int64_t in = wv.size(1), out = wv.size(0), N = xv.numel() / in;
    const DType dt = xv.dtype();
    Shape yshape = xv.shape();
    yshape.back() = out;
    Tensor y;
    if (use == OutputUse::kRead || !tape.recording()) {  // Note [Recompute early stop]
        y = Tensor::empty(tape.pool(), yshape, dt, MemCategory::kActivations);
        // The bias joins in the product's epilogue, before y is rounded (gemm_bias).
        if (b)
            gemm_bias(N, out, in, {xv.raw(), in, false}, {wv.raw(), in, true}, dt,
                      (*b)->value.raw(), y.raw(), out, dt);
        else
            gemm(N, out, in, 1.0f, {xv.raw(), in, false}, {wv.raw(), in, true}, dt, 0.0f,
                 y.raw(), out, dt);
    }
    Var yv = make_var(y, needs_grad(tape, {&x, &w, b}));
    if (!yv->requires_grad) return yv;
    Var bias = b ? *b : Var();
    tape.push("linear", [&tape, x, w, bias, yv, N, in, out, dt] {
        Tensor dy = yv->grad;
        yv->grad = Tensor();
        if (!dy.defined()) return;
        if (x->requires_grad) {
            Tensor dx = tape.new_grad(x);
            gemm(N, in, out, 1.0f, {dy.raw(), out, false}, {w->value.raw(), in, false}, dt, 0.0f,
                 dx.raw(), in, dt);
            Tape::add_grad(x, std::move(dx));
        }
        MemoryPool* pool = &tape.pool();
        // dW += dy^T x; db += colsum(dy): now, or in the weight-gradient pass (Tape::deferred).
        auto weight_grads = [pool, x, w, bias, dy, N, in, out, dt] {
            Tape t(*pool);
            if (w->requires_grad) {
                Tensor& dw = t.grad_zeros(w);
                gemm(out, in, N, 1.0f, {dy.raw(), out, true}, {x->value.raw(), in, false}, dt,
                     1.0f, dw.raw(), in, dw.dtype());
            }
            if (bias && bias->requires_grad) {
                t.grad_zeros(bias);
                with_f32_grad(bias, *pool, [&](float* db) {
                    ZT_DISPATCH_FLOAT(dt, kernels::bias_backward(dy.data<scalar_t>(), db, N, out));
                });
            }
        };
        if (!w->requires_grad && !(bias && bias->requires_grad)) return;
        if (tape.deferred())
            tape.deferred()->push_back(std::move(weight_grads));
        else
            weight_grads();
    });
    return yv;
}

}  // namespace zt::ops
