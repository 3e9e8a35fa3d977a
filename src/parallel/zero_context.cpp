#include "parallel/zero_context.h"

#include "parallel/grad_transport.h"
#include "util/timer.h"

namespace zt {

CommType comm_type_of(DType t) {
    switch (t) {
        case DType::kF32:
            return CommType::kF32;
        case DType::kBF16:
            return CommType::kBF16;
        case DType::kF16:
            return CommType::kF16;
    }
    ZT_FAIL("unknown dtype");
}

Tensor flat_slice(const Tensor& t, int64_t lo, int64_t n) {
    ZT_ASSERT(lo >= 0 && lo + n <= t.numel());
    return Tensor::view_of(t.storage(), t.offset() + lo, {n}, t.dtype());
}

ZeroContext::ZeroContext(MemoryPool& p, ParamArena& a, Communicator* c, ZeroOptions o,
                         ParamTier* tier)
    : pool(p), arena(a), comm(c), options(o), param_tier(tier) {
    ZT_CHECK(tier == nullptr || o.stage == 3,
             "zero_optimization.offload_param needs stage 3 (the weights are partitioned and "
             "gathered per module), got stage ",
             o.stage);
    if (comm) {
        ranks = comm->size();
        rank = comm->rank();
    }
    ZT_CHECK(options.stage >= 0 && options.stage <= 3,
             "zero_optimization.stage: expected 0, 1, 2 or 3, got ", options.stage);
    const int64_t P = arena.padded_numel();
    ZT_ASSERT(P % ranks == 0, "arena of ", P, " elements is not padded to ", ranks, " ranks");
    owned = owned_range(P, ranks, rank);
    ZT_ASSERT(arena.owned_lo() == owned.lo && arena.owned_hi() == owned.hi,
              "the arena's owned range does not match rank ", rank, " of ", ranks);
    const ArenaOptions expect =
        zero_arena_options(options.stage, arena.options().compute_dtype, arena.options().grad_dtype,
                           arena.numel(), ranks, rank);
    ZT_ASSERT(expect.full_master == arena.options().full_master &&
                  expect.full_grads == arena.options().full_grads &&
                  expect.full_compute == arena.options().full_compute,
              "the arena's layout is not ZeRO stage ", options.stage, "'s");

    const std::vector<Parameter*>& params = arena.params();
    for (size_t i = 0; i < params.size(); ++i) {
        param_index[params[i]] = static_cast<int>(i);
        param_ranges.push_back({params[i]->offset, params[i]->offset + params[i]->numel()});
    }
    buckets = plan_buckets(param_ranges, P, options.reduce_bucket_size);
    bucket_of.assign(params.size(), -1);
    for (size_t b = 0; b < buckets.size(); ++b)
        for (int i : buckets[b].params) bucket_of[static_cast<size_t>(i)] = static_cast<int>(b);
    transport = make_grad_transport(*this, options.grad_compression);
}

ZeroContext::~ZeroContext() = default;

void ZeroContext::wait_exposed(const CommHandle& h) {
    Stopwatch sw;
    h->wait();
    exposed_s += sw.elapsed_s();
}

double ZeroContext::sum_over_ranks(double x) { return sums_over_ranks({x})[0]; }

std::vector<double> ZeroContext::sums_over_ranks(std::vector<double> xs) {
    if (ranks == 1 || xs.empty()) return xs;
    const size_t k = xs.size();
    std::vector<double> all(static_cast<size_t>(ranks) * k);
    wait_exposed(comm->all_gather(
        xs.data(), all.data(),
        std::vector<int64_t>(static_cast<size_t>(ranks), static_cast<int64_t>(k)), CommType::kF64));
    for (size_t i = 0; i < k; ++i) {
        double s = 0;  // from 0 in rank order: sum_over_ranks' bits
        for (int r = 0; r < ranks; ++r) s += all[static_cast<size_t>(r) * k + i];
        xs[i] = s;
    }
    return xs;
}

}  // namespace zt
