#include "parallel/zero_gather.h"

#include <algorithm>
#include <vector>

namespace zt {

void AllGatherWeights::after_update() {
    if (ctx_.ranks == 1) return;
    MemScope scope(ctx_.pool, MemPhase::kComm);
    Tensor& w = ctx_.arena.compute();  // whole; this rank's owned range is current
    const int64_t P = ctx_.padded();
    const int64_t step = std::max<int64_t>(1, ctx_.options.allgather_bucket_size);
    std::vector<CommHandle> hs;
    const size_t es = dtype_size(w.dtype());
    char* base = static_cast<char*>(w.raw());
    for (int64_t lo = 0; lo < P; lo += step) {
        const Range r{lo, std::min(P, lo + step)};
        const Range mine = intersect(r, ctx_.owned);
        hs.push_back(ctx_.comm->all_gather(base + mine.lo * es, base + r.lo * es,
                                           rank_counts(r, P, ctx_.ranks), comm_type_of(w.dtype())));
    }
    for (auto& h : hs) ctx_.wait_exposed(h);
}

}  // namespace zt
