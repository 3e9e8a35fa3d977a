// Recompute regions (activation checkpointing): checkpoint() runs a function of some Vars without
// recording, keeps only its inputs and its output, and re-runs it with recording on during
// backward to get the gradients. Recompute is exact: the same kernels run on the same values in
// the same order, so gradients and losses are bit-identical to an un-checkpointed run (Note
// [Exact recompute]). Leaves out random state: there is no dropout yet (model.dropout must be 0),
// so a region needs no saved rng state; one will have to be added with dropout.
#pragma once

#include <functional>
#include <vector>

#include "autograd/tape.h"

namespace zt {

// A region's body: builds its output from `inputs` with ops and modules on `tape`. It must use
// the tape it is given (not one captured from outside) and be deterministic: it runs twice, the
// second time during backward.
using CheckpointFn = std::function<Var(Tape& tape, const std::vector<Var>& inputs)>;

// Runs fn(tape, inputs) as a recompute region and returns its output. Each Var appears in
// `inputs` at most once; fn must reach every activation it uses through `inputs` (parameters may be
// used directly).
//
// Forward: fn runs with the tape's recording off on detached copies of the inputs (Vars sharing
// the input values, requires_grad as the originals; parameter Vars are passed as themselves), so
// nothing inside is saved: each intermediate tensor is freed as soon as fn no longer uses it. One
// tape entry is pushed; it holds `inputs`, the output Var and fn.
//
// Backward of that entry: fn runs again with recording on into a fresh inner Tape on the same
// pool, the output's gradient is back-propagated through it, and the inputs' gradients go to the
// outer inputs. Parameters used inside accumulate into their arena gradients directly, as always.
// The stored output is released before the recompute (the recomputed one replaces it).
//
// Module hooks: modules called inside fn run their forward hooks twice, once in the forward and
// again in the recompute (ZeRO-3 needs the parameters gathered then too), and their backward
// hooks once, from the inner tape, at the same point of backward as without the region.
//
// When the tape is not recording (evaluation), fn simply runs on the inputs. When it is, the
// region records even if no input requires grad (parameters inside may).
Var checkpoint(Tape& tape, const std::vector<Var>& inputs, CheckpointFn fn);

}  // namespace zt
