// Reading a checkpoint's tensors into any layout (docs/checkpoints.md): a rank asks for a range of
// its own arena (its parameters' offsets, shapes and tensor-parallel parts) and gets the values
// the checkpoint holds there, whatever dp, ZeRO stage or tensor-parallel degree wrote it. The
// same tensor-parallel degree reads straight from the matching part's shards; another degree or
// pipeline stages on either side (parameters found by name, each in its stage's shards) map
// each element through the whole tensor (autograd/module.h, split_global_index and
// split_local_index) to the part and index that hold it.
#pragma once

#include <string>
#include <vector>

#include "autograd/module.h"
#include "checkpoint/direct_io.h"
#include "checkpoint/manifest.h"

namespace zt {

// Throws zt::Error (kInput) naming `where` and the first difference when the checkpoint is not
// of these parameters (names, whole shapes, splits), whatever layout each side has. `stage`: the
// parameters are one pipeline stage's (a part of the model's, matched by name).
void check_checkpoint_params(const Manifest& m, const std::vector<Parameter*>& params,
                             const std::string& where, bool stage = false);

// outs[i][0, hi - lo) = tensor names[i] over the arena range [lo, hi) of `params`' layout (padding
// past the parameters reads as 0). Checks the shards' sizes and CRC-32C as they are read.
void read_checkpoint_range(const std::string& dir, const Manifest& m,
                           const std::vector<Parameter*>& params, int64_t lo, int64_t hi,
                           const std::vector<std::string>& names, const std::vector<float*>& outs,
                           const DirectIoOptions& io = {}, bool stage = false);

}  // namespace zt
