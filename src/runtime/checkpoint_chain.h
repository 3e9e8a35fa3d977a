// Sparse parameters in checkpoints (docs/checkpoints.md, "Incremental checkpoints"): reading a
// checkpoint's sparse blocks, whatever layout wrote them, through its chain when it is incremental
// (the last full checkpoint, then each increment in order, Note [Incremental checkpoints]), and
// which older checkpoints a kept one needs, so that retention never deletes a base. Leaves out:
// writing (runtime/checkpointer.cpp).
#pragma once

#include <functional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/manifest.h"
#include "nn/sparse_params.h"

namespace zt {

class Engine;

// A checkpoint of a chain: its directory name ("step_00000010") and its identity (a random
// 64-bit id, hex, in its manifest), so that a rewritten checkpoint of the same step is not taken
// for the base an increment was written on.
struct ChainLink {
    std::string name, uid;
    bool operator==(const ChainLink&) const = default;
};

// The checkpoint's own link (uid empty when it has no sparse parameters) and the links its
// increments need, oldest (a full checkpoint) first; empty for a full checkpoint.
ChainLink chain_link(const Manifest& m);
std::vector<ChainLink> chain_of(const Manifest& m);

// The sparse tensors' placement as a short id (a CRC of SparseParams::plan_json), recorded in each
// manifest: a resumed chain continues only on the same placement, since an increment's blocks
// pair with the whole blocks of the same writers (rows and columns of a rank's shard).
std::string sparse_layout(const SparseParams& sp);

// The names of the checkpoints (under the same directory) that the given checkpoint directories'
// increments need. A manifest that cannot be read needs nothing.
std::set<std::string> chain_bases(const std::vector<std::string>& dirs);

// Each block of checkpoint `dir`'s sparse files that overlaps what this rank holds, whatever
// layout wrote it, checked against its CRC, handed to fn as (tensor index, whole block), one at a
// time: an incremental checkpoint's delta blocks are applied, in order, to the blocks of its
// chain's full checkpoint and increments (read from dir's parent directory). Throws naming a
// missing, replaced or damaged base, or a damaged block (after fn has seen the blocks before it).
void for_each_sparse_block(Engine& e, const Manifest& m, const std::string& dir,
                           const std::function<void(size_t, SparseBlock&)>& fn);

}  // namespace zt
