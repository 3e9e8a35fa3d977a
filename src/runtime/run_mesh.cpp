#include "runtime/run_mesh.h"

#include "comm/gather_strings.h"
#include "comm/hierarchical.h"
#include "util/log.h"

namespace zt {

namespace {

void add(CommStats& into, const CommStats& s) {
    for (int k = 0; k < kCollectiveKindCount; ++k) {
        into.count[k] += s.count[k];
        into.bytes_sent[k] += s.bytes_sent[k];
        into.seconds[k] += s.seconds[k];
    }
    into.busy_s += s.busy_s;  // groups in flight together count twice: an upper bound
}

}  // namespace

CommStats RunMesh::stats(const std::vector<const Communicator*>& extra) const {
    CommStats s;
    for (const Communicator* c : extra) add(s, c->stats());
    if (world) add(s, world->stats());
    if (dp && dp != world) add(s, dp->stats());
    if (dp_flat && dp_flat != world) add(s, dp_flat->stats());
    if (tp.comm) add(s, tp.comm->stats());
    if (pp) add(s, pp->stats());
    if (hpz) add(s, hpz->stats());
    if (tied) add(s, tied->stats());
    return s;
}

const Communicator* RunMesh::cross_host() const {
    return dp_flat ? cross_host_group(*dp) : nullptr;
}

int64_t RunMesh::cross_host_bytes() const {
    const Communicator* c = cross_host();
    if (!c) return 0;
    const CommStats s = c->stats();
    int64_t b = 0;
    for (int64_t x : s.bytes_sent) b += x;
    return b;
}

namespace {

// comm.hierarchical over m.dp (collective over it).
void make_dp_hierarchical(RunMesh& m, std::shared_ptr<Communicator>& owned, const std::string& mode,
                          bool report) {
    if (mode == "off" || m.dp == nullptr || m.dp->size() == 1) return;
    const std::vector<std::string> hosts = all_gather_strings(*m.dp, host_key());
    std::string why;
    owned = make_hierarchical(*m.dp, hosts, &why);
    if (!owned) {
        if (mode == "on" && report)
            log_warn("comm.hierarchical: the data-parallel collectives stay flat: ", why);
        return;
    }
    m.dp_flat = m.dp;
    m.dp = owned.get();
    if (report)
        log_info("comm.hierarchical: data-parallel reductions and gathers within each host first (",
                 m.dp->size() / ranks_per_host(hosts, nullptr), " hosts of ",
                 ranks_per_host(hosts, nullptr), " ranks)");
}

}  // namespace

// The dp group's extra groups (collective over it, in this order on every rank).
void finish_dp_groups(RunMesh& m, const MeshOptions& o, bool report) {
    make_dp_hierarchical(m, m.dp_hier_, o.hierarchical, report);
    if (m.dp == nullptr || m.dp->size() == 1) return;
    Communicator& flat = m.dp_flat ? *m.dp_flat : *m.dp;
    if (o.hpz > 1) {
        m.hpz_owned_ = flat.split(flat.rank() / o.hpz, flat.rank() % o.hpz);
        m.hpz = m.hpz_owned_.get();
    }
}

RunMesh split_run_mesh(Communicator* world, int tp, int pp, const MeshOptions& o) {
    RunMesh m;
    const int ranks = world ? world->size() : 1;
    const int rank = world ? world->rank() : 0;
    m.shape = make_mesh(ranks, tp, pp);
    m.coord = mesh_coord(m.shape, rank);
    m.world = world;
    m.dp = world;
    const bool report = rank == 0;
    if (tp == 1 && pp == 1) {
        finish_dp_groups(m, o, report);
        return m;
    }
    // Every rank takes part in each split, in the same order.
    const MeshSplit ds = dp_split(m.shape, rank);
    m.dp_owned_ = world->split(ds.color, ds.key);
    m.dp = m.dp_owned_.get();
    if (tp > 1) {
        const MeshSplit ts = tp_split(m.shape, rank);
        m.tp_owned_ = world->split(ts.color, ts.key);
        m.tp.comm = m.tp_owned_.get();
        m.tp.sequence_parallel = o.sequence_parallel;
    }
    if (pp > 1) {
        const MeshSplit ps = pp_split(m.shape, rank);
        m.pp_owned_ = world->split(ps.color, ps.key);
        m.pp = m.pp_owned_.get();
        // The first and last stage pair up; the stages between get a group of their own, unused.
        const bool end = m.coord.pp == 0 || m.coord.pp == pp - 1;
        m.tied_owned_ = m.pp->split(end ? 0 : 1 + m.coord.pp, m.coord.pp);
        if (end) m.tied = m.tied_owned_.get();
    }
    finish_dp_groups(m, o, report);
    return m;
}

}  // namespace zt
