// A run's communicators along the device mesh (parallel/mesh.h): the world split into this rank's
// data-parallel group (ZeRO, the data) and tensor-parallel group (the model's split), as the
// config's parallel section asks. With parallel.tensor 1 the dp group is the world itself.
#pragma once

#include <memory>

#include "comm/communicator.h"
#include "parallel/mesh.h"
#include "parallel/tensor_parallel.h"

namespace zt {

struct RunMesh {
    MeshShape shape;
    MeshCoord coord;                // this rank's
    Communicator* world = nullptr;  // null: one process
    Communicator* dp = nullptr;     // the world when tp is 1
    TensorParallel tp;
    // The communication of every group this rank is in, summed (for metrics).
    CommStats stats() const;

  private:
    friend RunMesh split_run_mesh(Communicator* world, int tp, bool sequence_parallel);
    std::shared_ptr<Communicator> dp_owned_, tp_owned_;
};

// Collective over the world: splits it into dp groups of world / tp ranks and tp groups of tp
// adjacent ranks (Megatron's order); sequence_parallel: the group splits rows too.
RunMesh split_run_mesh(Communicator* world, int tp, bool sequence_parallel = false);

}  // namespace zt
