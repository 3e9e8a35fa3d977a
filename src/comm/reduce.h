// The fixed-order sum every backend's reductions go through (Note [Fixed-order reduction]).
// Internal to the comm layer.
#pragma once

#include <cstdint>
#include <span>

#include "comm/communicator.h"

namespace zt::comm_detail {

// Note [Fixed-order reduction]
// dst[i] = ((srcs[0][i] + srcs[1][i]) + srcs[2][i]) + ... with srcs in rank order, accumulated in
// f32 for f32/bf16/f16 (f64 for kF64; wrapping integer add for i32/i64/u8) and, for bf16/f16,
// rounded once at the end. Each element's value depends only on the inputs at that element and
// their order, never on how the vector is cut into segments, so all_reduce (a reduce_scatter over
// any segmentation, then an all_gather) gives exactly the bits of reduce_scatter + all_gather, and
// a repeated run gives the same bits. dst may alias any src: every chunk is read fully before it is
// written.
void reduce_fixed_order(std::span<const void* const> srcs, void* dst, int64_t count, CommType t);

}  // namespace zt::comm_detail
