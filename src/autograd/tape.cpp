#include "autograd/tape.h"

#include "autograd/module.h"
#include "tensor/kernels/elementwise.h"

namespace zt {

void Tape::push(const char* op, std::function<void()> backward) {
    entries_.push_back(Entry{Kind::kOp, op, nullptr, std::move(backward)});
}

void Tape::push_module_enter(Module& m) {
    entries_.push_back(Entry{Kind::kModuleEnter, "module", &m, nullptr});
}

void Tape::push_module_exit(Module& m) {
    entries_.push_back(Entry{Kind::kModuleExit, "module", &m, nullptr});
}

void Tape::backward(const Var& loss, float seed) {
    ZT_ASSERT(loss->value.numel() == 1, "backward needs a scalar loss, got shape ",
              shape_str(loss->value.shape()));
    Tensor g = Tensor::empty(*pool_, loss->value.shape(), loss->value.dtype(),
                             MemCategory::kActivations);
    g.fill(seed);
    add_grad(loss, std::move(g));
    run_backward();
}

void Tape::backward_from(Var out, Tensor grad) {
    // An output whose value was elided (OutputUse::kGradOnly) has no shape to check against.
    ZT_ASSERT(!out->value.defined() || grad.numel() == out->value.numel(),
              "backward_from: gradient ", shape_str(grad.shape()), " for output ",
              shape_str(out->value.shape()));
    add_grad(out, std::move(grad));
    out.reset();
    run_backward();
}

void Tape::run_backward() {
    MemScope mem_scope(*pool_, MemPhase::kBackward);  // restores the caller's context, even on throw
    std::vector<MemContext> mem_outer;  // allocation contexts of the modules backward is inside
    bool was_recording = recording_;
    recording_ = false;
    for (size_t i = entries_.size(); i-- > 0;) {
        Entry& e = entries_[i];
        switch (e.kind) {
            case Kind::kOp: e.backward(); break;
            case Kind::kModuleExit: {
                const std::string& name = e.module->name();
                mem_outer.push_back(pool_->push_context(
                    name.empty() ? std::string_view("model") : std::string_view(name),
                    MemPhase::kBackward));
                e.module->run_hooks(HookPoint::kPreBackward);
                break;
            }
            case Kind::kModuleEnter:
                e.module->run_hooks(HookPoint::kPostBackward);
                if (!mem_outer.empty()) {
                    pool_->set_context(mem_outer.back());
                    mem_outer.pop_back();
                }
                break;
        }
        entries_.pop_back();  // frees what the op saved
    }
    recording_ = was_recording;
}

void Tape::note_output(const Module& m, const Var& out) {
    if (!check_finite_ || !first_nonfinite_.empty() || !out || !out->value.defined()) return;
    if (!kernels::all_finite(out->value)) first_nonfinite_ = m.name().empty() ? "model" : m.name();
}

void Tape::add_grad(const Var& v, Tensor g) {
    if (!v->requires_grad) return;
    if (!v->grad.defined() && v->bind_grad) v->bind_grad(*v);
    if (!v->grad.defined()) {
        ZT_ASSERT(!v->is_param, "parameter gradient missing");
        v->grad = std::move(g);
        return;
    }
    ZT_ASSERT(v->grad.numel() == g.numel(), "gradient shape mismatch");
    // Copy on write: an adopted gradient may still be shared with another Var (add passes one
    // buffer to both inputs), so it is copied before the first in-place addition. Parameter
    // gradients are views of the arena and always accumulated in place.
    if (!v->is_param && v->grad.storage().use_count() > 1)
        v->grad = v->grad.clone(MemCategory::kActivations);
    kernels::add_inplace(v->grad, g);
}

Tensor& Tape::grad_zeros(const Var& v) {
    if (!v->grad.defined() && v->bind_grad) v->bind_grad(*v);
    if (!v->grad.defined())
        v->grad = Tensor::zeros(*pool_, v->value.shape(), v->value.dtype(),
                                MemCategory::kActivations);
    else if (!v->is_param && v->grad.storage().use_count() > 1)
        v->grad = v->grad.clone(MemCategory::kActivations);  // copy on write, as in add_grad
    return v->grad;
}

Tensor Tape::new_grad(const Var& v) const {
    return Tensor::empty(*pool_, v->value.shape(), v->value.dtype(), MemCategory::kActivations);
}

}  // namespace zt
