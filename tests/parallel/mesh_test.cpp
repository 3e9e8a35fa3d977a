// Device mesh: rank <-> coordinates in Megatron's order (tp fastest, then dp, then pp), groups
// that partition the world along each axis, split arguments that rebuild those groups, errors.
#include "parallel/mesh.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "util/error.h"

namespace zt {
namespace {

constexpr MeshAxis kAxes[] = {MeshAxis::kDp, MeshAxis::kTp, MeshAxis::kPp};

// Every shape with world <= 24, prime and non-prime degrees included.
std::vector<MeshShape> all_shapes() {
    std::vector<MeshShape> shapes;
    for (int dp = 1; dp <= 24; ++dp)
        for (int tp = 1; dp * tp <= 24; ++tp)
            for (int pp = 1; dp * tp * pp <= 24; ++pp) shapes.push_back({dp, tp, pp});
    return shapes;
}

std::string name(const MeshShape& m) {
    return "dp " + std::to_string(m.dp) + " tp " + std::to_string(m.tp) + " pp " +
           std::to_string(m.pp);
}

std::string error_of(int world, int tp, int pp) {
    try {
        make_mesh(world, tp, pp);
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::kInput);
        return e.message();
    }
    return "(no error)";
}

void expect_mentions(const std::string& message, const std::vector<std::string>& parts) {
    for (const std::string& p : parts)
        EXPECT_NE(message.find(p), std::string::npos) << "expected \"" << p << "\" in: " << message;
}

TEST(Mesh, MakeMeshDividesTheWorld) {
    EXPECT_EQ(make_mesh(1, 1, 1), (MeshShape{1, 1, 1}));
    EXPECT_EQ(make_mesh(8, 1, 1), (MeshShape{8, 1, 1}));
    EXPECT_EQ(make_mesh(8, 2, 1), (MeshShape{4, 2, 1}));
    EXPECT_EQ(make_mesh(24, 2, 3), (MeshShape{4, 2, 3}));
    EXPECT_EQ(make_mesh(6, 2, 3), (MeshShape{1, 2, 3}));
    for (const MeshShape& m : all_shapes()) EXPECT_EQ(make_mesh(m.world(), m.tp, m.pp), m);
}

TEST(Mesh, RankFormulaIsMegatronOrder) {
    const MeshShape m = make_mesh(24, 2, 3);  // dp 4
    for (int pp = 0; pp < m.pp; ++pp)
        for (int dp = 0; dp < m.dp; ++dp)
            for (int tp = 0; tp < m.tp; ++tp) {
                const int rank = pp * m.dp * m.tp + dp * m.tp + tp;
                EXPECT_EQ(mesh_rank(m, {dp, tp, pp}), rank);
                EXPECT_EQ(mesh_coord(m, rank), (MeshCoord{dp, tp, pp}));
            }
    // tp is fastest: ranks 0 and 1 are tensor-parallel peers, 0 and 2 data-parallel ones.
    EXPECT_EQ(tp_group(m, 0), (std::vector<int>{0, 1}));
    EXPECT_EQ(dp_group(m, 0), (std::vector<int>{0, 2, 4, 6}));
    EXPECT_EQ(pp_group(m, 0), (std::vector<int>{0, 8, 16}));
    EXPECT_EQ(dp_group(m, 13), (std::vector<int>{9, 11, 13, 15}));  // pp 1, tp 1
}

TEST(Mesh, CoordRankRoundTrip) {
    for (const MeshShape& m : all_shapes()) {
        std::set<std::vector<int>> coords;
        for (int r = 0; r < m.world(); ++r) {
            const MeshCoord c = mesh_coord(m, r);
            ASSERT_TRUE(c.dp >= 0 && c.dp < m.dp && c.tp >= 0 && c.tp < m.tp && c.pp >= 0 &&
                        c.pp < m.pp)
                << name(m) << " rank " << r;
            EXPECT_EQ(mesh_rank(m, c), r) << name(m);
            coords.insert({c.dp, c.tp, c.pp});
        }
        EXPECT_EQ(static_cast<int>(coords.size()), m.world()) << name(m);  // a bijection
    }
}

TEST(Mesh, GroupsPartitionTheWorldAlongEachAxis) {
    for (const MeshShape& m : all_shapes()) {
        for (MeshAxis a : kAxes) {
            std::map<int, std::vector<int>> group_of_first;  // first member -> group
            std::vector<int> seen(static_cast<size_t>(m.world()), 0);
            for (int r = 0; r < m.world(); ++r) {
                const std::vector<int> g = mesh_group(m, a, r);
                ASSERT_EQ(static_cast<int>(g.size()), mesh_axis_size(m, a)) << name(m);
                // r is in its own group, at the position of its index along a.
                const MeshCoord c = mesh_coord(m, r);
                const int index = a == MeshAxis::kDp ? c.dp : a == MeshAxis::kTp ? c.tp : c.pp;
                EXPECT_EQ(g[static_cast<size_t>(index)], r) << name(m);
                // Members agree with r on the other two axes and are in axis order.
                for (size_t i = 0; i < g.size(); ++i) {
                    MeshCoord expect = c;
                    (a == MeshAxis::kDp ? expect.dp : a == MeshAxis::kTp ? expect.tp : expect.pp) =
                        static_cast<int>(i);
                    EXPECT_EQ(mesh_coord(m, g[i]), expect) << name(m) << " axis "
                                                           << mesh_axis_name(a);
                }
                // Every member computes the same group.
                for (int member : g) EXPECT_EQ(mesh_group(m, a, member), g) << name(m);
                if (group_of_first.emplace(g.front(), g).second)
                    for (int member : g) ++seen[static_cast<size_t>(member)];
            }
            // The distinct groups cover every rank exactly once.
            for (int r = 0; r < m.world(); ++r)
                EXPECT_EQ(seen[static_cast<size_t>(r)], 1) << name(m) << " rank " << r;
            EXPECT_EQ(static_cast<int>(group_of_first.size()), m.world() / mesh_axis_size(m, a));
        }
    }
}

TEST(Mesh, SplitArgumentsRebuildTheGroups) {
    // What Communicator::split does with (color, key): group by color, order by (key, rank).
    for (const MeshShape& m : all_shapes()) {
        for (MeshAxis a : kAxes) {
            std::map<int, std::vector<std::pair<int, int>>> by_color;
            for (int r = 0; r < m.world(); ++r) {
                const MeshSplit s = mesh_split(m, a, r);
                EXPECT_GE(s.color, 0);
                by_color[s.color].push_back({s.key, r});
            }
            for (auto& [color, members] : by_color) {
                std::sort(members.begin(), members.end());
                std::vector<int> ranks;
                for (size_t i = 0; i < members.size(); ++i) {
                    EXPECT_EQ(members[i].first, static_cast<int>(i));  // key = new rank
                    ranks.push_back(members[i].second);
                }
                EXPECT_EQ(mesh_group(m, a, ranks.front()), ranks) << name(m);
            }
        }
    }
    const MeshShape m = make_mesh(8, 2, 2);  // dp 2
    EXPECT_EQ(dp_split(m, 3).color, 1);
    EXPECT_EQ(dp_split(m, 3).key, 1);
    EXPECT_EQ(tp_split(m, 3).color, 2);
    EXPECT_EQ(pp_split(m, 7).color, 3);
    EXPECT_EQ(pp_split(m, 7).key, 1);
}

TEST(Mesh, ErrorsNameWorldTensorAndPipeline) {
    expect_mentions(error_of(6, 4, 1),
                    {"world size 6", "parallel.tensor (4)", "parallel.pipeline (1)", "= 4",
                     "4 or 8"});
    expect_mentions(error_of(10, 2, 3), {"world size 10", "(2)", "(3)", "= 6", "6 or 12"});
    expect_mentions(error_of(3, 2, 2), {"world size 3", "= 4", "(4)"});
    expect_mentions(error_of(0, 1, 1), {"world size (0)", ">= 1"});
    expect_mentions(error_of(4, 0, 1), {"parallel.tensor (0)"});
    expect_mentions(error_of(4, 1, -1), {"parallel.pipeline (-1)"});

    // Out-of-range ranks and coordinates are broken invariants, not input errors.
    const MeshShape m = make_mesh(4, 2, 1);
    for (int bad : {-1, 4}) {
        try {
            mesh_coord(m, bad);
            ADD_FAILURE() << "rank " << bad << " accepted";
        } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::kInternal);
        }
    }
    EXPECT_THROW(mesh_rank(m, {0, 2, 0}), Error);
    EXPECT_THROW(dp_group(m, 9), Error);
}

}  // namespace
}  // namespace zt
