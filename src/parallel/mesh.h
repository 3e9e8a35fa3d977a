// The device mesh: a pure function from (world, dp, tp, pp) to each rank's coordinates and to the
// groups of ranks that communicate along one axis. Megatron's order: tp varies fastest, then dp,
// then pp, so rank = pp_idx * dp * tp + dp_idx * tp + tp_idx (tensor-parallel peers are adjacent
// ranks, usually one node). A mesh is a value passed to whoever builds communicators; there is no
// global process-group registry (shared/STYLE.md rule 5).
#pragma once

#include <vector>

namespace zt {

struct MeshShape {
    int dp = 1, tp = 1, pp = 1;
    int world() const { return dp * tp * pp; }
    bool operator==(const MeshShape&) const = default;
};

struct MeshCoord {
    int dp = 0, tp = 0, pp = 0;
    bool operator==(const MeshCoord&) const = default;
};

enum class MeshAxis { kDp, kTp, kPp };
const char* mesh_axis_name(MeshAxis a);  // "dp", "tp", "pp"
int mesh_axis_size(const MeshShape& m, MeshAxis a);

// The mesh of `world` ranks with tensor degree tp and pipeline degree pp; dp = world / (tp * pp).
// Throws zt::Error (kInput) naming world, tp and pp when tp * pp does not divide world, or when
// any of them is < 1.
MeshShape make_mesh(int world, int tp, int pp);

// rank in [0, m.world()) <-> coordinates; out-of-range arguments are internal errors.
MeshCoord mesh_coord(const MeshShape& m, int rank);
int mesh_rank(const MeshShape& m, MeshCoord c);

// The ranks that differ from `rank` only along axis a, in the order of that axis's index (so a
// group's i-th member has index i along a). Every rank is in exactly one group per axis.
std::vector<int> mesh_group(const MeshShape& m, MeshAxis a, int rank);
inline std::vector<int> dp_group(const MeshShape& m, int rank) {
    return mesh_group(m, MeshAxis::kDp, rank);
}
inline std::vector<int> tp_group(const MeshShape& m, int rank) {
    return mesh_group(m, MeshAxis::kTp, rank);
}
inline std::vector<int> pp_group(const MeshShape& m, int rank) {
    return mesh_group(m, MeshAxis::kPp, rank);
}

// Arguments for Communicator::split(color, key) that turn the world communicator into `rank`'s
// group along axis a: color is the group's first member (>= 0, distinct per group, as
// MPI_Comm_split wants), key is the index along a, so the new communicator's rank is that index.
struct MeshSplit {
    int color = 0;
    int key = 0;
};
MeshSplit mesh_split(const MeshShape& m, MeshAxis a, int rank);
inline MeshSplit dp_split(const MeshShape& m, int rank) {
    return mesh_split(m, MeshAxis::kDp, rank);
}
inline MeshSplit tp_split(const MeshShape& m, int rank) {
    return mesh_split(m, MeshAxis::kTp, rank);
}
inline MeshSplit pp_split(const MeshShape& m, int rank) {
    return mesh_split(m, MeshAxis::kPp, rank);
}

}  // namespace zt
