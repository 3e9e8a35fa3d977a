// Data parallelism and ZeRO stages 0-3 over one data-parallel group: what the Engine (runtime)
// drives around its forward, backward and optimizer step. The stage is a type (zero_stage.h:
// a gradient reduction, a partitioned update and a parameter gathering), chosen here once from
// ZeroOptions::stage; this class holds what every stage shares. The arena's layout must come
// from zero_arena_options() for the same stage and group. Note [ZeRO data flow] in
// zero_stage.cpp says what each stage does when; docs/parallel.md is the user guide.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "autograd/param_arena.h"
#include "comm/communicator.h"
#include "optim/optimizer.h"
#include "parallel/zero_context.h"
#include "parallel/zero_layout.h"
#include "parallel/zero_stage.h"

namespace zt {

class ZeroDataParallel {
  public:
    // comm: the data-parallel group; null means one rank. Installs hooks on the model's modules.
    // params: stage 3's owned compute weights on a tier (offload_param), else null.
    ZeroDataParallel(MemoryPool& pool, Module& model, ParamArena& arena, Communicator* comm,
                     ZeroOptions options, ParamTier* params = nullptr);
    ZeroDataParallel(const ZeroDataParallel&) = delete;
    ZeroDataParallel& operator=(const ZeroDataParallel&) = delete;

    int ranks() const { return ctx_.ranks; }
    int rank() const { return ctx_.rank; }
    int stage() const { return stage_->number(); }
    Communicator* comm() const { return ctx_.comm; }

    // The range this rank's optimizer updates: the whole arena at stage 0, the owned range above.
    Range update_range() const { return stage_->update().range(); }
    std::vector<OptimSegment> update_segments() const;  // offsets relative to update_range()
    // f32 master weights of update_range() in the arena (undefined when an offload tier holds
    // them).
    Tensor update_master();
    // The compute copy of update_range() as an optimizer step writes it (offload/update_state.h);
    // data == nullptr where the compute weights are the arena's master weights (f32).
    ComputeCopy update_compute();
    Tensor update_grads();  // reduced gradients of update_range() (valid after end_backward)

    // Around each micro-step: begin_backward before the backward (`boundary`: the last micro-step
    // before an optimizer step), end_backward after it (every reduction issued and finished).
    void begin_backward(bool boundary) { stage_->reduction().begin_backward(boundary); }
    // comm.priority with overlap_comm (Note [Priority]): a sparse exchange runs in each backward,
    // and gradient buckets that fill before it wait for it. Returns the function the exchange
    // calls when it has completed; empty (and nothing changes) without priority, overlap or a
    // second rank.
    std::function<void()> prioritize_backward_exchange() {
        if (!ctx_.backward_exchange_done || ctx_.ranks < 2) return {};
        ctx_.backward_exchanges = true;
        return ctx_.backward_exchange_done;
    }
    void end_backward();
    // After a forward without backward (evaluation): releases gathered parameters.
    void end_forward_only() { stage_->gather().end_forward_only(); }

    // Sum over the whole arena of part(g, n) taken over each rank's partition, added in rank
    // order: the same bits at every stage (stage 0 computes every partition's part locally).
    // g holds update_range()'s f32 gradients.
    double partitioned_sum(float* g, const std::function<double(float*, int64_t)>& part) {
        return stage_->update().partitioned_sum(g, part);
    }
    // partitioned_sum() in two halves (Note [The step's scalars in one collective]): this
    // rank's part, and whether it is still to be summed over ranks (sums_over_ranks).
    double partitioned_local_sum(float* g, const std::function<double(float*, int64_t)>& part) {
        return stage_->update().local_sum(g, part);
    }
    bool partitioned_over_ranks() const { return stage_->update().spread_over_ranks(); }
    // x summed over ranks in rank order.
    double sum_over_ranks(double x) { return ctx_.sum_over_ranks(x); }
    // Each of xs summed over ranks in rank order, in one collective.
    std::vector<double> sums_over_ranks(std::vector<double> xs) {
        return ctx_.sums_over_ranks(std::move(xs));
    }
    // After the compute copy of update_range() was rewritten (an optimizer step, a load): makes
    // the compute weights every rank needs whole again (all-gather at stages 1-2; the persistent
    // gathers at stage 3). A collective.
    void after_update() { stage_->gather().after_update(); }

    // The whole arena on every rank from each rank's update_range() values `mine` (a collective
    // where the ranges are partitions).
    std::vector<float> gather_update_ranges(const float* mine);

    // Seconds the caller spent waiting for communication (not hidden behind compute).
    double exposed_comm_s() const { return ctx_.exposed_s; }
    void reset_exposed_comm_s() { ctx_.exposed_s = 0; }
    // Communication waited for outside the reductions (1-bit Adam's momentum exchange).
    void add_exposed_comm_s(double s) { ctx_.exposed_s += s; }
    // What the gradient reductions sent through compression.gradients' codec so far, and the
    // codec's error-feedback residuals (grad_transport.h).
    CompressionStats grad_compression_stats() const;
    // What stage 3's parameter gathers sent through zero_quantized_weights' codec so far (zeros
    // otherwise): bytes before and after encoding, and the decoded weights' error.
    CompressionStats weight_compression_stats() const {
        return stage_->gather().compression_stats();
    }
    // zero_quantized_weights' codec where stage 3's gathers use it (several ranks), else null.
    const CodecOptions* weight_codec() const {
        return ctx_.options.quantized_weights && ctx_.ranks > 1 && stage() == 3
                   ? &ctx_.options.weight_codec
                   : nullptr;
    }
    GradTransport& grad_transport() { return *ctx_.transport; }
    // Stage 3: elements of gathered parameters alive now (persistent ones included).
    int64_t live_gathered() const { return stage_->gather().live_gathered(); }

  private:
    ZeroContext ctx_;
    std::unique_ptr<ZeroStage> stage_;  // built from ctx_, so declared after it
};

}  // namespace zt
