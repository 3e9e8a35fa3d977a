// embedding: table: (V, C), ids: (N) -> (N, C); saves ids. backward: dtable += scatter(dy).
#include "autograd/ops.h"
#include "autograd/ops/grad_util.h"
#include "tensor/kernels/embedding.h"

namespace zt::ops {

Var embedding(Tape& tape, const Var& table, std::span<const int32_t> ids) {
    const Tensor& tv = table->value;
    const int64_t V = tv.size(0), C = tv.size(1), N = static_cast<int64_t>(ids.size());
    const DType dt = tv.dtype();
    Tensor y = Tensor::empty(tape.pool(), {N, C}, dt, MemCategory::kActivations);
    ZT_DISPATCH_FLOAT(dt, kernels::embedding_forward(ids.data(), tv.data<scalar_t>(),
                                                     y.data<scalar_t>(), N, V, C));
    Var yv = make_var(y, needs_grad(tape, {&table}));
    if (!yv->requires_grad) return yv;
    std::vector<int32_t> saved(ids.begin(), ids.end());
    tape.push("embedding", [&tape, table, yv, saved = std::move(saved), N, V, C, dt] {
        Tensor dy = yv->grad;
        yv->grad = Tensor();
        if (!dy.defined()) return;
        tape.grad_zeros(table);
        with_f32_grad(table, tape.pool(), [&](float* dtable) {
            ZT_DISPATCH_FLOAT(dt, kernels::embedding_backward(saved.data(), dy.data<scalar_t>(),
                                                              dtable, N, V, C));
        });
    });
    return yv;
}

}  // namespace zt::ops
