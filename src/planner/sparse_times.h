// Sharded embedding tables' time by shape for the planner (Note [Sparse step by shape] in
// sparse_times.cpp): each SparseShape a family names (models/family.h, sparse_shapes) is timed
// once on this machine through the engine's own ShardedTables, and kept in the calibration
// profile (MachineProfile::shape_s) beside the kernel shapes of shape_times.h.
#pragma once

#include <optional>
#include <span>
#include <string>

#include "models/family.h"
#include "planner/profile.h"

namespace zt {

// "sparse f32 t2 512x1 r2000 d16 z1.05 adagrad": one micro-batch of the shape.
std::string sparse_time_key(int threads, const SparseShape& s);

// Seconds of the shapes from the profile; nullopt when one was not measured. Pure.
std::optional<double> sparse_shapes_seconds(const MachineProfile& p, int threads,
                                            std::span<const SparseShape> shapes);

// What one micro-batch of sharded-table lookups sends per rank: its distinct ids (8 bytes each,
// to their owners) and their rows' floats (4 bytes each, back from the owners in forward; their
// gradients to the owners in backward). Measured with the time, on the same draws.
struct SparseExchange {
    double ids = 0, floats = 0;
};

// The shapes' exchange summed, from the profile; nullopt when one was not measured. Pure.
std::optional<SparseExchange> sparse_shapes_exchange(const MachineProfile& p,
                                                     std::span<const SparseShape> shapes);

// Times the shapes the profile lacks (time or exchange) at `threads` (each for about
// `seconds_each`), into p.shape_s; the intra-op thread count is restored after. Returns how many
// were measured.
int measure_sparse_shapes(MachineProfile& p, int threads, std::span<const SparseShape> shapes,
                          double seconds_each = 0.01);

}  // namespace zt
