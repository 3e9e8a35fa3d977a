// cross_entropy: logits: (N, V), targets: (N) -> scalar mean loss (f32) over counted rows;
// saves logits (Var), targets, lse: (N) f32.
#include "autograd/ops.h"
#include "autograd/ops/grad_util.h"
#include "tensor/kernels/cross_entropy.h"

namespace zt::ops {

Var cross_entropy(Tape& tape, const Var& logits, std::span<const int32_t> targets) {
    const Tensor& lv = logits->value;
    const int64_t V = lv.size(-1), N = lv.numel() / V;
    ZT_ASSERT(static_cast<int64_t>(targets.size()) == N, "cross_entropy: ", targets.size(),
              " targets for ", N, " rows");
    const DType dt = lv.dtype();
    Tensor losses = Tensor::empty(tape.pool(), {2, N}, DType::kF32, MemCategory::kActivations);
    float* row_loss = losses.data<float>();
    float* lse = row_loss + N;
    ZT_DISPATCH_FLOAT(dt, kernels::cross_entropy_forward(lv.data<scalar_t>(), targets.data(),
                                                         row_loss, lse, N, V));
    int64_t counted = 0;
    double sum = 0;
    for (int64_t i = 0; i < N; ++i) {
        if (targets[i] < 0) continue;
        ++counted;
        sum += row_loss[i];
    }
    Tensor loss = Tensor::empty(tape.pool(), {1}, DType::kF32, MemCategory::kActivations);
    loss.data<float>()[0] = counted ? static_cast<float>(sum / counted) : 0.0f;
    Var yv = make_var(loss, needs_grad(tape, {&logits}));
    if (!yv->requires_grad) return yv;
    std::vector<int32_t> saved(targets.begin(), targets.end());
    tape.push("cross_entropy", [&tape, logits, yv, losses, saved = std::move(saved), N, V, counted,
                                dt] {
        Tensor dy = yv->grad;
        yv->grad = Tensor();
        if (!dy.defined()) return;
        float g = dy.data<float>()[0] / static_cast<float>(counted ? counted : 1);
        Tensor dloss = Tensor::empty(tape.pool(), {N}, DType::kF32, MemCategory::kWorkspace);
        for (int64_t i = 0; i < N; ++i) dloss.data<float>()[i] = g;
        Tensor dlogits = tape.new_grad(logits);
        ZT_DISPATCH_FLOAT(dt, kernels::cross_entropy_backward(
                                  logits->value.data<scalar_t>(), saved.data(),
                                  losses.data<float>() + N, dloss.data<float>(),
                                  dlogits.data<scalar_t>(), N, V));
        Tape::add_grad(logits, std::move(dlogits));
    });
    return yv;
}

}  // namespace zt::ops
