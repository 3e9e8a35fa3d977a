// The engine's part of 1-bit Adam (optim/onebit_adam.h, parallel/momentum_exchange.h).
#include <cmath>

#include "optim/clip.h"
#include "parallel/grad_transport.h"
#include "runtime/engine.h"

// Note [1-bit Adam]
// Updates 1 .. freeze_step (the warm-up) are ordinary data-parallel steps: the gradients are
// all-reduced in full precision (communication_data_type) and the optimizer runs Adam without
// bias correction, so the variance exp_avg_sq settles. From update freeze_step + 1 on:
// - backward reduces nothing (begin_backward(false) on every micro-batch): each rank keeps the
//   gradient of its own micro-batches, g_i / R as the micro-loss seeds make it;
// - step() forms the local momentum c_i = m * beta1 + (1 - beta1) * (R * g_i/R), m the
//   momentum every rank agreed on last step (onebit_local_momentum), and MomentumExchange
//   averages the c_i over the ranks through the 1-bit codec with worker and server error
//   feedback; without compression that average is beta1 * m + (1 - beta1) * mean_i(g_i), the
//   momentum the one-process run has;
// - the optimizer stores the average as exp_avg and updates with the frozen exp_avg_sq.
// The reported grad_norm of a compressed step is sqrt(mean_i |g_i|^2), the root mean square of
// the ranks' local gradient norms (the averaged gradient is never formed; it is at most this). It
// is also the non-finite check, the same on every rank, so every rank skips the same steps. A
// skipped step exchanges nothing and leaves the residuals as they were. With one rank nothing
// travels: the average of one is the value itself, and only the frozen variance remains.
// What 1-bit Adam does not compose with is refused by the config parser and again when the engine
// is built (onebit_adam_refusal): ZeRO stages 1-3 (they partition the momentum that is exchanged
// whole), tensor and pipeline parallelism, gradient clipping (no global gradient to clip), fp16
// loss scaling, offloaded optimizer state, pruning, and compression.gradients (1-bit Adam
// compresses the momentum itself).
// Sharded and dynamic embedding tables (SparseParams) keep their own sparse optimizer and their
// own exchange of gradient rows in both phases; only the arena's parameters (the MLPs, and tables
// replicated as dense parameters) take 1-bit Adam. The step's grad_norm then adds the tables'
// exact global gradient to the ranks' local root mean square. Replicated tables take it too:
// their rows never held by a warm-up batch are masked (Note [Unset variance]) and the update
// exchange keeps the seldom-held ones stable (Note [Update exchange]); DeepSpeed's momentum
// exchange diverges on them within steps of the freeze (docs/compression.md).

// Note [Unset variance]
// A value whose exp_avg_sq is still below eps^2 when the variance freezes never had a gradient in
// the warm-up that counts (a weight of a ReLU unit dead since the start, an embedding row no
// batch has held yet): its frozen step would divide by eps alone. Left in, the compressed
// exchange gives it a nonzero value (a block's scale; the error feedback), its unit wakes up,
// its gradient is divided by eps, and the run diverges: measured on DLRM, 484 of the 7,442 MLP
// values had v = 0 at the freeze, and their updates grew from 1e3 to 5e14 in ten steps. Such a
// value is masked in the compressed phase: it sends and keeps zero momentum and does not move
// (weight decay aside), on one rank as on many. DeepSpeed asks the user for the same mask
// (exp_avg_mask); this one is derived from the state, the same on every rank.
//
// Note [Update exchange]
// With optimizer.params.exchange "update" (the default), the compressed phase exchanges u_i = c_i /
// (sqrt(v) + eps) instead of the local momentum c_i, v the frozen exp_avg_sq (the same bits on
// every rank), and turns the average back into the momentum (times sqrt(v) + eps) for the update
// and the state. Without compression it is the same step (the average of c_i / d is the average of
// c_i, over d), up to two roundings per value. With the 1-bit codec, DeepSpeed's exchange gives
// each value its block's mean |c|, then divides by its own sqrt(v) + eps: a value whose frozen
// variance is near zero (an embedding row seldom in a batch) gets a huge step from its neighbours'
// momentum, and the run diverges (measured on DLRM even with the mask above: values with a small
// but set variance; docs/compression.md). Exchanged as updates, the block's scale is a mean step
// and the error feedback is kept in steps. "momentum" is DeepSpeed's exchange.

namespace zt {

void Engine::init_onebit() {
    OneBitAdamLayout l;
    l.zero_stage = dp_->stage();
    l.tensor_or_pipeline = options_.tp.active() || options_.pp != nullptr;
    l.gradient_clipping = options_.gradient_clipping;
    l.fp16 = scaler_ != nullptr;
    l.offload_optimizer = options_.offload_optimizer.device != "none";
    l.pruning = options_.pruning.enabled();
    l.grad_compression = options_.zero.grad_compression.enabled;
    const std::string why = onebit_adam_refusal(l);
    ZT_CHECK(why.empty(), why);
    if (dp_->ranks() > 1)
        momentum_ = std::make_unique<MomentumExchange>(
            pool_, *dp_->comm(), dp_->update_range().size(), kOneBitAdamCodec);
}

bool Engine::onebit_compressing() const {
    return onebit_ != nullptr && onebit_->compressed(updates_done_ + 1);
}

ResidualState& Engine::comm_state() {
    if (momentum_) return *momentum_;
    return dp_->grad_transport();
}

double Engine::onebit_grad_sq(float* g) {
    // Stage 0: partitioned_sum adds every partition's part locally, with no collective.
    const double local = dp_->partitioned_sum(g, grad_sq_sum_l2);
    const double ranks = dp_->ranks();
    return dp_->sum_over_ranks(local) * ranks;  // sum_i |R g_i/R|^2 / R
}

void Engine::onebit_momentum(float* g, int64_t n) {
    const float* m = state_->view(1);  // 0 is the master weights, then exp_avg
    ZT_ASSERT(m != nullptr, "1-bit Adam: the momentum is not in memory");
    const OneBitAdamOptions& o = onebit_->options();
    onebit_local_momentum(g, m, n, o.beta1, dp_->ranks());
    const float* v = state_->view(2);  // exp_avg_sq, frozen
    // Note [Unset variance]: the mask on one rank too, so that layouts train alike.
    onebit_exchange_in(g, v, n, o.eps, o.exchange_update && momentum_ != nullptr);
    if (!momentum_) return;
    dp_->add_exposed_comm_s(momentum_->average(g));
    onebit_exchange_out(g, v, n, o.eps, o.exchange_update);
}

}  // namespace zt
