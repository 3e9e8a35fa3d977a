// bce_with_logits: logits: (B) or (B, 1), labels: (B) in [0, 1] -> scalar f32 mean loss;
// saves logits (Var) and labels. backward: dlogits = dloss (sigmoid(z) - y) / B (written).
#include "tensor/kernels/bce.h"

#include <cmath>

#include "autograd/ops.h"
#include "autograd/ops/grad_util.h"

namespace zt::ops {

Var bce_with_logits(Tape& tape, const Var& logits, std::span<const float> labels) {
    const Tensor& lv = logits->value;
    ZT_CHECK(lv.dim() == 1 || (lv.dim() == 2 && lv.size(1) == 1),
             "bce_with_logits: logits have "
             "shape ",
             shape_str(lv.shape()), ", expected (B) or (B, 1)");
    const int64_t B = lv.size(0);
    ZT_CHECK(B > 0, "bce_with_logits: empty batch (B = 0); the mean loss needs one sample");
    ZT_CHECK(static_cast<int64_t>(labels.size()) == B, "bce_with_logits: ", labels.size(),
             " labels for B = ", B, " logits; pass one label per sample");
    for (int64_t i = 0; i < B; ++i)
        ZT_CHECK(labels[i] >= 0.0f && labels[i] <= 1.0f, "bce_with_logits: label ", labels[i],
                 " at position ", i, " is outside [0, 1]; labels are click probabilities");
    const DType dt = lv.dtype();
    std::vector<float> losses(static_cast<size_t>(B));
    ZT_DISPATCH_FLOAT(
        dt, kernels::bce_with_logits_forward(lv.data<scalar_t>(), labels.data(), losses.data(), B));
    double sum = 0;
    for (float l : losses) sum += l;
    Tensor loss = Tensor::empty(tape.pool(), {1}, DType::kF32, MemCategory::kActivations);
    loss.data<float>()[0] = static_cast<float>(sum / static_cast<double>(B));
    Var yv = make_var(loss, needs_grad(tape, {&logits}));
    if (!yv->requires_grad) return yv;
    std::vector<float> saved(labels.begin(), labels.end());
    tape.push("bce_with_logits", [&tape, logits, yv, saved = std::move(saved), B, dt] {
        Tensor dy = yv->grad;
        yv->grad = Tensor();
        if (!dy.defined()) return;
        const float scale = dy.data<float>()[0] / static_cast<float>(B);
        Tensor dlogits = tape.new_grad(logits);
        ZT_DISPATCH_FLOAT(
            dt, kernels::bce_with_logits_backward(logits->value.data<scalar_t>(), saved.data(),
                                                  scale, dlogits.data<scalar_t>(), B));
        Tape::add_grad(logits, std::move(dlogits));
    });
    return yv;
}

}  // namespace zt::ops
