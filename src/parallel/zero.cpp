#include "parallel/zero.h"

#include <algorithm>

#include "parallel/grad_transport.h"

namespace zt {

ZeroDataParallel::ZeroDataParallel(MemoryPool& pool, Module& model, ParamArena& arena,
                                   Communicator* comm, ZeroOptions options, ParamTier* params)
    : ctx_(pool, arena, comm, options, params), stage_(make_zero_stage(ctx_, model)) {
    after_update();  // every rank's compute weights from the initial ones (init_weights)
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
    if (!ctx_.arena.options().hold_master) return Tensor();
    if (ctx_.arena.options().full_master) return flat_slice(ctx_.arena.master(), u.lo, u.size());
    return ctx_.arena.master();
}

ComputeCopy ZeroDataParallel::update_compute() {
    ParamArena& a = ctx_.arena;
    if (!a.options().hold_compute) return {nullptr, a.options().compute_dtype};  // on the tier
    if (a.options().hold_master && a.compute().storage() == a.master().storage()) return {};
    const Range u = update_range();
    const Tensor& c = a.compute();
    char* base = static_cast<char*>(c.raw());
    if (a.options().full_compute) base += u.lo * static_cast<int64_t>(dtype_size(c.dtype()));
    return {base, c.dtype()};
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

std::vector<float> ZeroDataParallel::gather_update_ranges(const float* mine) {
    const Range u = update_range();
    const int64_t P = ctx_.padded();
    std::vector<float> out(static_cast<size_t>(P));
    if (ctx_.ranks == 1 || u.size() == P) {
        std::copy(mine, mine + u.size(), out.begin() + u.lo);
        return out;
    }
    ctx_.wait_exposed(ctx_.comm->all_gather(mine, out.data(), rank_counts({0, P}, P, ctx_.ranks),
                                            CommType::kF32));
    return out;
}

CompressionStats ZeroDataParallel::grad_compression_stats() const {
    return ctx_.transport->stats();
}

}  // namespace zt
