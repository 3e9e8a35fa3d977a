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
// exact global gradient to the ranks' local root mean square. Replicated tables are the wrong
// place for it: rows a batch seldom touches freeze a near-zero variance, and the compressed
// momentum's per-block scale then moves them by huge steps (measured: the DLRM example diverges
// within steps of the freeze); shard them (docs/compression.md).

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
    onebit_local_momentum(g, m, n, onebit_->options().beta1, dp_->ranks());
    if (momentum_) dp_->add_exposed_comm_s(momentum_->average(g));
}

}  // namespace zt
