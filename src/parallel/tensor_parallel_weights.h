// Tensor-parallel weights in the one-process layout: the whole arena one process would have (every
// parameter whole, in registration order), assembled from the parts the ranks of a tensor-parallel
// group hold, and a rank's part cut back out of it. Weight files (export, init_from) and the
// equivalence tests see only the one-process layout, whatever the mesh.
#pragma once

#include <cstdint>
#include <vector>

#include "autograd/module.h"
#include "parallel/tensor_parallel.h"

namespace zt {

// Elements of the one-process arena: the sum of the parameters' whole sizes.
int64_t whole_numel(const std::vector<Parameter*>& params);

// Collective over tp: `local` holds this rank's arena in the rank's layout (params' offsets and
// shapes); returns the one-process arena (every rank gets it). Parameters held whole are taken
// from the group's rank 0 (they are identical on every rank).
std::vector<float> tp_assemble(const std::vector<Parameter*>& params, const float* local,
                               const TensorParallel& tp);

// No communication: `whole` (the one-process arena) -> this rank's arena `local` (its layout; at
// least the params' extent, padding untouched).
void tp_cut(const std::vector<Parameter*>& params, const float* whole, float* local);

}  // namespace zt
