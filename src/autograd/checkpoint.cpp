// Recompute regions; see checkpoint.h.
//
// Note [Exact recompute]
// A region's backward must produce the same bits as the ops it stands for would have produced on
// the outer tape. Three things make it so:
// - the recompute runs the same kernels on the same input values, so every recomputed activation
//   equals the one the forward computed (recording changes what is kept, not what is computed);
// - the inner tape runs the region's ops newest first, exactly where the outer tape would have
//   run them, since the region's single entry sits where its last op would have been;
// - an input's gradient is accumulated in the same order: before the inner backward, the outer
//   input's gradient so far (from consumers newer than the region) is moved into the detached
//   copy, the region's ops add to it as they would have added to the input itself, and the sum
//   is moved back. Adding the region's total at the end instead would round differently.
#include "autograd/checkpoint.h"

#include <utility>

namespace zt {

namespace {

// Detached copies of the inputs: activations become new Vars sharing the value, so the region's
// ops record into (and take gradients from) the copies, not the outer graph. Parameters stay
// themselves: their gradients are arena views that accumulate in place.
std::vector<Var> detach(const std::vector<Var>& inputs) {
    std::vector<Var> out;
    out.reserve(inputs.size());
    for (const Var& v : inputs)
        out.push_back(v->is_param ? v : make_var(v->value, v->requires_grad));
    return out;
}

// Turns a tape's recording off for a scope, and back on at its end, exceptions included.
class RecordingOff {
public:
    explicit RecordingOff(Tape& tape) : tape_(tape) { tape_.set_recording(false); }
    ~RecordingOff() { tape_.set_recording(true); }
    RecordingOff(const RecordingOff&) = delete;
    RecordingOff& operator=(const RecordingOff&) = delete;

private:
    Tape& tape_;
};

}  // namespace

Var checkpoint(Tape& tape, const std::vector<Var>& inputs, CheckpointFn fn) {
    for (size_t i = 0; i < inputs.size(); ++i) {
        ZT_ASSERT(inputs[i] && inputs[i]->value.defined(), "checkpoint: undefined input ", i);
        for (size_t j = 0; j < i; ++j)  // one detached copy per Var keeps the gradient order exact
            ZT_ASSERT(inputs[j] != inputs[i], "checkpoint: input ", i, " repeats input ", j);
    }
    if (!tape.recording()) return fn(tape, inputs);

    Var inner_out;
    {
        RecordingOff off(tape);
        inner_out = fn(tape, detach(inputs));
    }
    ZT_ASSERT(inner_out && inner_out->value.defined(), "checkpoint: region returned no value");
    Var out = make_var(inner_out->value, true);
    inner_out.reset();

    MemoryPool* pool = &tape.pool();
    Tape* outer = &tape;
    tape.push("checkpoint", [pool, outer, inputs, out, fn = std::move(fn)]() mutable {
        Tensor dy = std::move(out->grad);
        out.reset();  // the recompute makes its own copy; nothing newer than the region uses out
        if (!dy.defined()) return;
        Tape inner(*pool);
        inner.set_recomputing(true);  // Note [Recompute early stop] (ops.h)
        inner.set_deferred(outer->deferred());
        std::vector<Var> args = detach(inputs);
        for (size_t i = 0; i < args.size(); ++i)  // Note [Exact recompute]
            if (!inputs[i]->is_param) args[i]->grad = std::move(inputs[i]->grad);
        Var y = fn(inner, args);
        inner.backward_from(std::move(y), std::move(dy));
        for (size_t i = 0; i < args.size(); ++i)
            if (!inputs[i]->is_param) inputs[i]->grad = std::move(args[i]->grad);
    });
    return out;
}

}  // namespace zt
