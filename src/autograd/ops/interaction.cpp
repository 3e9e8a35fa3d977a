// dot_interaction: x: (B, D), embs: K of (B, D) -> (B, D + P) (kernels/interaction.h for the
// layout); saves x and embs (Vars). backward: dx = dy[:, :D] + dT[0], dembs[k] = dT[k + 1].
#include "tensor/kernels/interaction.h"

#include <vector>

#include "autograd/ops.h"
#include "autograd/ops/grad_util.h"

namespace zt::ops {

namespace {

template <typename T>
std::vector<const T*> emb_ptrs(std::span<const Var> embs) {
    std::vector<const T*> p;
    for (const Var& e : embs) p.push_back(e->value.data<T>());
    return p;
}

}  // namespace

Var dot_interaction(Tape& tape, const Var& x, std::span<const Var> embs, bool self_interaction) {
    const Tensor& xv = x->value;
    ZT_CHECK(xv.dim() == 2, "dot_interaction: x has shape ", shape_str(xv.shape()),
             ", expected 2 dimensions (B, D)");
    const int64_t B = xv.size(0), D = xv.size(1), K = static_cast<int64_t>(embs.size());
    const DType dt = xv.dtype();
    for (int64_t k = 0; k < K; ++k) {
        const Tensor& e = embs[k]->value;
        ZT_CHECK(e.shape() == (Shape{B, D}), "dot_interaction: embs[", k, "] has shape ",
                 shape_str(e.shape()), ", expected ", shape_str({B, D}),
                 " like x (B, D); every embedding output needs x's batch and dimension");
        ZT_CHECK(e.dtype() == dt, "dot_interaction: embs[", k, "] is ", dtype_name(e.dtype()),
                 ", x is ", dtype_name(dt), "; all inputs need one dtype");
    }
    const int64_t width = D + kernels::dot_interaction_pairs(K, self_interaction);
    Tensor y = Tensor::empty(tape.pool(), {B, width}, dt, MemCategory::kActivations);
    ZT_DISPATCH_FLOAT(
        dt, kernels::dot_interaction_forward(xv.data<scalar_t>(), emb_ptrs<scalar_t>(embs).data(),
                                             K, B, D, self_interaction, y.data<scalar_t>()));
    bool grad = needs_grad(tape, {&x});
    for (const Var& e : embs) grad = grad || needs_grad(tape, {&e});
    Var yv = make_var(y, grad);
    if (!yv->requires_grad) return yv;
    std::vector<Var> saved(embs.begin(), embs.end());
    tape.push(
        "dot_interaction", [&tape, x, saved = std::move(saved), yv, K, B, D, self_interaction, dt] {
            Tensor dy = yv->grad;
            yv->grad = Tensor();
            if (!dy.defined()) return;
            Tensor dx = tape.new_grad(x);
            std::vector<Tensor> dembs;
            for (const Var& e : saved) dembs.push_back(tape.new_grad(e));
            ZT_DISPATCH_FLOAT(dt, {
                std::vector<scalar_t*> dp;
                for (Tensor& t : dembs) dp.push_back(t.data<scalar_t>());
                kernels::dot_interaction_backward(
                    x->value.data<scalar_t>(), emb_ptrs<scalar_t>(saved).data(),
                    dy.data<scalar_t>(), K, B, D, self_interaction, dx.data<scalar_t>(), dp.data());
            });
            Tape::add_grad(x, std::move(dx));
            for (int64_t k = 0; k < K; ++k) Tape::add_grad(saved[k], std::move(dembs[k]));
        });
    return yv;
}

}  // namespace zt::ops
