#include "parallel/zero.h"

#include <algorithm>

namespace zt {

ZeroDataParallel::ZeroDataParallel(MemoryPool& pool, Module& model, ParamArena& arena,
                                   Communicator* comm, ZeroOptions options)
    : ctx_(pool, arena, comm, options), stage_(make_zero_stage(ctx_, model)) {
    after_update();  // every rank's compute weights from the initial master weights
}

std::vector<OptimSegment> ZeroDataParallel::update_segments() const {
    const Range u = update_range();
    std::vector<OptimSegment> out;
    const std::vector<Parameter*>& params = ctx_.arena.params();
    for (size_t i = 0; i < params.size(); ++i) {
        const Range r = intersect(ctx_.param_ranges[i], u);
        if (!r.empty()) out.push_back({r.lo - u.lo, r.size(), params[i]->decay});
    }
    return out;
}

// The update range's view of a buffer that holds either the whole arena or the owned range
// (which is the update range whenever the buffer is partitioned: zero_arena_options()).
Tensor ZeroDataParallel::update_master() {
    const Range u = update_range();
    if (ctx_.arena.options().full_master) return flat_slice(ctx_.arena.master(), u.lo, u.size());
    return ctx_.arena.master();
}

Tensor ZeroDataParallel::update_grads() {
    const Range u = update_range();
    if (ctx_.arena.options().full_grads) return flat_slice(ctx_.arena.grads(), u.lo, u.size());
    return ctx_.arena.grads();
}

void ZeroDataParallel::end_backward() {
    stage_->reduction().end_backward();
    stage_->gather().end_backward();
}

void ZeroDataParallel::after_update() {
    ctx_.arena.sync_compute();
    stage_->gather().after_update();
}

std::vector<float> ZeroDataParallel::gather_master() {
    ParamArena& arena = ctx_.arena;
    const int64_t P = arena.padded_numel();
    std::vector<float> out(static_cast<size_t>(P));
    if (arena.options().full_master) return arena.master().to_vector();
    const float* mine = arena.master().data<float>();
    if (ctx_.ranks == 1) {
        std::copy(mine, mine + P, out.begin());
        return out;
    }
    ctx_.wait_exposed(ctx_.comm->all_gather(mine, out.data(), rank_counts({0, P}, P, ctx_.ranks),
                                            CommType::kF32));
    return out;
}

void ZeroDataParallel::load_master(const float* whole) {
    float* m = ctx_.arena.master().data<float>();
    if (ctx_.arena.options().full_master)
        std::copy(whole, whole + ctx_.arena.padded_numel(), m);
    else
        std::copy(whole + ctx_.owned.lo, whole + ctx_.owned.hi, m);
    after_update();
}

}  // namespace zt
