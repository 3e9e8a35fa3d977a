// Reverse-mode tape. Ops push a backward closure (which owns what it saved) while recording;
// backward() runs them newest first and drops each closure right after it runs, so saved
// activations are released as soon as backward no longer needs them. Module markers on the tape
// fire the modules' backward hooks (pre-backward when backward reaches a module's last op,
// post-backward when it passes its first).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "autograd/variable.h"
#include "tensor/memory.h"

namespace zt {

class Module;

class Tape {
public:
    explicit Tape(MemoryPool& pool) : pool_(&pool) {}
    Tape(const Tape&) = delete;
    Tape& operator=(const Tape&) = delete;

    MemoryPool& pool() const { return *pool_; }
    bool recording() const { return recording_; }
    void set_recording(bool on) { recording_ = on; }
    // True on the inner tape of a recompute region's backward (checkpoint.h): the region's output
    // value is never read there, only its gradient flows in (Note [Recompute early stop]).
    bool recomputing() const { return recomputing_; }
    void set_recomputing(bool on) { recomputing_ = on; }

    // Records a backward step. Only call when recording() and some input requires grad.
    void push(const char* op, std::function<void()> backward);
    void push_module_enter(Module& m);
    void push_module_exit(Module& m);

    // Seeds loss->grad with `seed` (a scalar loss) and runs the tape in reverse, then clears it.
    void backward(const Var& loss, float seed = 1.0f);
    // Seeds out->grad with `grad` (shaped like out's value; adopted, or added when out already has
    // a gradient) and runs the tape in reverse, then clears it. The tape drops its reference to
    // `out` first, so pass the last one (std::move) to free out's value as soon as the backward of
    // its producer has run. Used by recompute regions (checkpoint.h) on their inner tape.
    void backward_from(Var out, Tensor grad);
    void clear() { entries_.clear(); }
    size_t size() const { return entries_.size(); }

    // Zero-bubble pipelines (runtime/pipeline_runner.h): while a sink is set, ops that can
    // (linear) compute only their input gradient in backward and append the weight gradient as
    // a closure to the sink, for a later weight-gradient pass (the closure holds what it needs:
    // the input and the output gradient). Recompute regions pass the sink to their inner tape.
    using Deferred = std::vector<std::function<void()>>;
    void set_deferred(Deferred* sink) { deferred_ = sink; }
    Deferred* deferred() const { return deferred_; }

    // Non-finite watch (nan_policy "stop"): when on, Module::call checks each module's output and
    // the tape remembers the first module whose output held a NaN or infinity in this forward.
    void set_check_finite(bool on) { check_finite_ = on; }
    bool check_finite() const { return check_finite_; }
    void note_output(const Module& m, const Var& out);
    const std::string& first_nonfinite_module() const { return first_nonfinite_; }
    void clear_nonfinite() { first_nonfinite_.clear(); }

    // Adds g to v's gradient: adopts g when v has none yet (activations), else adds elementwise
    // (into the arena gradient for parameters).
    static void add_grad(const Var& v, Tensor g);
    // v's gradient for kernels that accumulate into it: created as zeros when missing, and made
    // exclusive first when it is an adopted buffer still shared with another Var.
    Tensor& grad_zeros(const Var& v);
    // A fresh activation-gradient buffer shaped like v's value.
    Tensor new_grad(const Var& v) const;

private:
    void run_backward();  // runs the entries newest first, popping each

    enum class Kind { kOp, kModuleEnter, kModuleExit };
    struct Entry {
        Kind kind;
        const char* op;
        Module* module;
        std::function<void()> backward;
    };
    MemoryPool* pool_;
    bool recording_ = true;
    bool recomputing_ = false;
    bool check_finite_ = false;
    std::string first_nonfinite_;
    Deferred* deferred_ = nullptr;
    std::vector<Entry> entries_;
};

// True when an op on these inputs must be recorded.
inline bool needs_grad(const Tape& tape, std::initializer_list<const Var*> inputs) {
    if (!tape.recording()) return false;
    for (const Var* v : inputs)
        if (v && *v && (*v)->requires_grad) return true;
    return false;
}

}  // namespace zt
