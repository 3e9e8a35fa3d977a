#include "parallel/zero_layout.h"

#include <algorithm>

#include "util/error.h"

namespace zt {

Range intersect(Range a, Range b) {
    Range r{std::max(a.lo, b.lo), std::min(a.hi, b.hi)};
    if (r.hi < r.lo) r.hi = r.lo;
    return r;
}

int64_t padded_length(int64_t numel, int ranks) {
    ZT_ASSERT(ranks >= 1 && numel >= 0);
    return (numel + ranks - 1) / ranks * ranks;
}

Range owned_range(int64_t padded, int ranks, int rank) {
    ZT_ASSERT(ranks >= 1 && rank >= 0 && rank < ranks && padded % ranks == 0);
    const int64_t part = padded / ranks;
    return {rank * part, (rank + 1) * part};
}

std::vector<int64_t> rank_counts(Range r, int64_t padded, int ranks) {
    std::vector<int64_t> counts(static_cast<size_t>(ranks));
    for (int q = 0; q < ranks; ++q) counts[q] = intersect(r, owned_range(padded, ranks, q)).size();
    return counts;
}

ArenaOptions zero_arena_options(int stage, DType compute, DType grad, int64_t numel, int ranks,
                                int rank) {
    ZT_ASSERT(stage >= 0 && stage <= 3);
    ArenaOptions o;
    o.compute_dtype = compute;
    o.grad_dtype = grad;
    o.pad_to = ranks;
    const Range own = owned_range(padded_length(numel, ranks), ranks, rank);
    o.owned_lo = own.lo;
    o.owned_hi = own.hi;
    const bool mixed = compute != DType::kF32;
    o.full_master = stage == 0 || (stage < 3 && !mixed);
    o.full_grads = stage < 2;
    o.full_compute = stage < 3;
    return o;
}

std::vector<Bucket> plan_buckets(const std::vector<Range>& param_ranges, int64_t padded,
                                 int64_t bucket_elems) {
    ZT_ASSERT(bucket_elems >= 1);
    std::vector<Bucket> out;
    Bucket cur;
    cur.range = {padded, padded};
    for (int i = static_cast<int>(param_ranges.size()); i-- > 0;) {
        const Range& p = param_ranges[static_cast<size_t>(i)];
        ZT_ASSERT(p.hi <= cur.range.lo, "parameters out of arena order");
        cur.range.lo = p.lo;
        cur.params.push_back(i);
        if (cur.range.size() >= bucket_elems) {
            out.push_back(cur);
            cur = Bucket{{p.lo, p.lo}, {}};
        }
    }
    if (!cur.params.empty()) out.push_back(cur);
    ZT_ASSERT(out.empty() || out.back().range.lo == 0, "parameters do not start the arena");
    return out;
}

}  // namespace zt
