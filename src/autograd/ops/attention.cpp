// causal_attention: qkv: (B, T, 3C) -> (B, T, C); saves qkv, out, lse: (B, H, T) f32.
// Scratch comes from the pool (category workspace) and lives only during each kernel call.
#include "autograd/ops.h"
#include "autograd/ops/grad_util.h"
#include "tensor/kernels/attention.h"
#include "tensor/threads.h"

namespace zt::ops {

namespace {
// The kernels' scratch, sized in bytes by attention_workspace_bytes, as f32 elements.
Tensor attention_workspace(MemoryPool& pool, const kernels::AttentionShape& s) {
    const int64_t bytes = kernels::attention_workspace_bytes(s, num_threads());
    return Tensor::empty(pool, {(bytes + 3) / 4}, DType::kF32, MemCategory::kWorkspace);
}
}  // namespace

Var causal_attention(Tape& tape, const Var& qkv, int64_t B, int64_t T, int64_t C, int64_t H) {
    const Tensor& qv = qkv->value;
    ZT_ASSERT(qv.numel() == B * T * 3 * C, "attention: qkv ", shape_str(qv.shape()));
    const DType dt = qv.dtype();
    const kernels::AttentionShape s{B, T, C, H};
    Tensor out = Tensor::empty(tape.pool(), {B * T, C}, dt, MemCategory::kActivations);
    Tensor lse = Tensor::empty(tape.pool(), {B, H, T}, DType::kF32, MemCategory::kActivations);
    {
        Tensor ws = attention_workspace(tape.pool(), s);
        ZT_DISPATCH_FLOAT(dt, kernels::attention_forward(qv.data<scalar_t>(), out.data<scalar_t>(),
                                                         lse.data<float>(), s, ws.raw()));
    }
    Var yv = make_var(out, needs_grad(tape, {&qkv}));
    if (!yv->requires_grad) return yv;
    tape.push("attention", [&tape, qkv, yv, lse, s, dt] {
        Tensor dy = yv->grad;
        yv->grad = Tensor();
        if (!dy.defined()) return;
        Tensor dqkv = tape.new_grad(qkv);
        Tensor ws = attention_workspace(tape.pool(), s);
        ZT_DISPATCH_FLOAT(dt, kernels::attention_backward(
                                  qkv->value.data<scalar_t>(), yv->value.data<scalar_t>(),
                                  dy.data<scalar_t>(), lse.data<float>(), dqkv.data<scalar_t>(), s,
                                  ws.raw()));
        Tape::add_grad(qkv, std::move(dqkv));
    });
    return yv;
}

}  // namespace zt::ops
