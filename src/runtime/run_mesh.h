// A run's communicators along the device mesh (parallel/mesh.h): the world split into this rank's
// data-parallel group (ZeRO, the data), tensor-parallel group (the model's split) and pipeline
// group (its stages), as the config's parallel section asks. With parallel.tensor and
// parallel.pipeline 1 the dp group is the world itself.
#pragma once

#include <memory>
#include <string>

#include "comm/communicator.h"
#include "parallel/mesh.h"
#include "parallel/tensor_parallel.h"

namespace zt {

struct MeshOptions {
    bool sequence_parallel = false;  // the tp group splits rows too
    // comm.hierarchical: "off"; "auto", the dp group's reductions and gathers within each host
    // first where its ranks sit on several hosts, one block of ranks each; "on", the same, and a
    // warning with the reason where they do not.
    std::string hierarchical = "off";
    int hpz = 1;  // zero_hpz_partition_size > 1: groups of hpz consecutive dp ranks
};

struct RunMesh {
    MeshShape shape;
    MeshCoord coord;                // this rank's
    Communicator* world = nullptr;  // null: one process
    Communicator* dp = nullptr;     // the world when tp and pp are 1
    TensorParallel tp;
    Communicator* pp = nullptr;  // the pipeline group (stage s is its rank s); null: one stage
    // The first and last stage of this rank's pipeline group (rank 0 the first), which both hold
    // the tied input embedding and output head; null on the stages between and without a pipeline.
    Communicator* tied = nullptr;
    // comm.hierarchical: dp is then a hierarchical communicator over this flat group
    // (comm/hierarchical.h); null otherwise.
    Communicator* dp_flat = nullptr;
    // zero_hpz_partition_size: this rank's group of that many consecutive dp ranks; null: off.
    Communicator* hpz = nullptr;
    // The communication of every group this rank is in, summed (for metrics), with `extra`
    // channels of the model's own (SparseParams::channels).
    CommStats stats(const std::vector<const Communicator*>& extra = {}) const;
    // The dp group's group across hosts (null: not hierarchical), and the bytes this rank sent
    // over it so far (0: not hierarchical).
    const Communicator* cross_host() const;
    int64_t cross_host_bytes() const;

  private:
    friend RunMesh split_run_mesh(Communicator* world, int tp, int pp, const MeshOptions& o);
    friend void finish_dp_groups(RunMesh& m, const MeshOptions& o, bool report);
    std::shared_ptr<Communicator> dp_owned_, tp_owned_, pp_owned_, tied_owned_, dp_hier_,
        hpz_owned_;
};

// Collective over the world: splits it into dp groups of world / (tp pp) ranks, tp groups of tp
// adjacent ranks and pp groups of pp ranks (Megatron's order, parallel/mesh.h), then makes the
// dp group's extra groups the options ask for.
RunMesh split_run_mesh(Communicator* world, int tp, int pp = 1, const MeshOptions& o = {});

}  // namespace zt
