// Device mesh (mesh.h): rank = pp_idx * dp * tp + dp_idx * tp + tp_idx.
#include "parallel/mesh.h"

#include <cstdint>

#include "util/error.h"

namespace zt {

namespace {

// The stride of axis a in the rank numbering, and its index in c.
int axis_stride(const MeshShape& m, MeshAxis a) {
    switch (a) {
        case MeshAxis::kTp: return 1;
        case MeshAxis::kDp: return m.tp;
        case MeshAxis::kPp: return m.tp * m.dp;
    }
    ZT_ASSERT(false, "unknown mesh axis ", static_cast<int>(a));
    __builtin_unreachable();
}

int& axis_index(MeshCoord& c, MeshAxis a) {
    switch (a) {
        case MeshAxis::kTp: return c.tp;
        case MeshAxis::kDp: return c.dp;
        case MeshAxis::kPp: return c.pp;
    }
    ZT_ASSERT(false, "unknown mesh axis ", static_cast<int>(a));
    __builtin_unreachable();
}

void check_rank(const MeshShape& m, int rank) {
    ZT_ASSERT(m.dp >= 1 && m.tp >= 1 && m.pp >= 1, "mesh dp ", m.dp, " tp ", m.tp, " pp ", m.pp);
    ZT_ASSERT(rank >= 0 && rank < m.world(), "rank ", rank, " outside a mesh of ", m.world());
}

}  // namespace

const char* mesh_axis_name(MeshAxis a) {
    switch (a) {
        case MeshAxis::kDp: return "dp";
        case MeshAxis::kTp: return "tp";
        case MeshAxis::kPp: return "pp";
    }
    return "?";
}

int mesh_axis_size(const MeshShape& m, MeshAxis a) {
    switch (a) {
        case MeshAxis::kDp: return m.dp;
        case MeshAxis::kTp: return m.tp;
        case MeshAxis::kPp: return m.pp;
    }
    ZT_ASSERT(false, "unknown mesh axis ", static_cast<int>(a));
    __builtin_unreachable();
}

MeshShape make_mesh(int world, int tp, int pp) {
    ZT_CHECK(world >= 1 && tp >= 1 && pp >= 1, "mesh: world size (", world,
             "), parallel.tensor (", tp, ") and parallel.pipeline (", pp,
             ") must all be >= 1");
    const int64_t model = int64_t{tp} * pp;  // ranks holding one replica of the model
    if (world % model != 0) {
        const int64_t below = world / model * model;
        ZT_FAIL("mesh: world size ", world, " is not divisible by parallel.tensor (", tp,
                ") x parallel.pipeline (", pp, ") = ", model, "; run on a multiple of ", model,
                " ranks (", below > 0 ? str_cat(below, " or ") : std::string(), below + model,
                "), or change parallel.tensor or parallel.pipeline");
    }
    return MeshShape{.dp = static_cast<int>(world / model), .tp = tp, .pp = pp};
}

MeshCoord mesh_coord(const MeshShape& m, int rank) {
    check_rank(m, rank);
    return MeshCoord{.dp = rank / m.tp % m.dp, .tp = rank % m.tp, .pp = rank / (m.tp * m.dp)};
}

int mesh_rank(const MeshShape& m, MeshCoord c) {
    ZT_ASSERT(c.dp >= 0 && c.dp < m.dp && c.tp >= 0 && c.tp < m.tp && c.pp >= 0 && c.pp < m.pp,
              "coordinate (dp ", c.dp, ", tp ", c.tp, ", pp ", c.pp, ") outside the mesh (dp ",
              m.dp, ", tp ", m.tp, ", pp ", m.pp, ")");
    return (c.pp * m.dp + c.dp) * m.tp + c.tp;
}

std::vector<int> mesh_group(const MeshShape& m, MeshAxis a, int rank) {
    MeshCoord c = mesh_coord(m, rank);
    axis_index(c, a) = 0;
    const int first = mesh_rank(m, c);
    const int stride = axis_stride(m, a);
    std::vector<int> group(static_cast<size_t>(mesh_axis_size(m, a)));
    for (size_t i = 0; i < group.size(); ++i) group[i] = first + static_cast<int>(i) * stride;
    return group;
}

MeshSplit mesh_split(const MeshShape& m, MeshAxis a, int rank) {
    MeshCoord c = mesh_coord(m, rank);
    const int key = axis_index(c, a);
    axis_index(c, a) = 0;
    return MeshSplit{.color = mesh_rank(m, c), .key = key};
}

}  // namespace zt
