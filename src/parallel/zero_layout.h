// ZeRO's layout of the flat parameter arena (DESIGN.md, Memory model), as pure functions: which
// range each data-parallel rank owns, which buffers a rank holds whole at each stage, and the
// gradient buckets. The arena is padded to a multiple of the rank count, so rank r owns exactly
// [r P/N, (r+1) P/N) of the padded length P.
#pragma once

#include <cstdint>
#include <vector>

#include "autograd/param_arena.h"

namespace zt {

struct Range {
    int64_t lo = 0, hi = 0;
    int64_t size() const { return hi - lo; }
    bool empty() const { return hi <= lo; }
    friend bool operator==(const Range&, const Range&) = default;
};

Range intersect(Range a, Range b);
int64_t padded_length(int64_t numel, int ranks);  // numel rounded up to a multiple of ranks
Range owned_range(int64_t padded, int ranks, int rank);
// How much of r each rank owns, in rank order: the counts of a reduce_scatter or all_gather of r.
std::vector<int64_t> rank_counts(Range r, int64_t padded, int ranks);

// Which buffers a rank holds whole (the rest hold its owned range only) at a ZeRO stage:
//   stage | master (f32)                      | grads | compute copy | optimizer state
//   0     | whole                             | whole | whole        | whole
//   1, 2  | owned (mixed); whole in f32, where | 1: whole, 2: owned | whole | owned
//         | the master is the compute weight   |       |              |
//   3     | owned                             | owned | owned        | owned
ArenaOptions zero_arena_options(int stage, DType compute, DType grad, int64_t numel, int ranks,
                                int rank);

// A gradient bucket: a contiguous range of the arena holding whole parameters (indices into the
// arena's parameter list). Buckets tile [0, padded): planned from the end of the arena, since
// backward produces gradients roughly in reverse registration order; the first bucket planned
// (the arena's tail) also covers the padding. A bucket closes as soon as it holds at least
// bucket_elems elements (so a parameter larger than that closes the bucket it joins).
struct Bucket {
    Range range;
    std::vector<int> params;
};
std::vector<Bucket> plan_buckets(const std::vector<Range>& param_ranges, int64_t padded,
                                 int64_t bucket_elems);

}  // namespace zt
