// Priority benchmark (Note [Urgent ops], comm/communicator.h; docs/compression.md "Priority"):
// how long an urgent all-gather (a ZeRO-3 prefetch, an embedding lookup) waits when bulk
// reduce-scatters (gradient buckets) were issued before it, on zerotrain's MPI backend:
//   alone      the gather with nothing queued (the floor);
//   in order   behind --bulk reduce-scatters, no priority (each op runs in issue order);
//   urgent     the same queue, the gather urgent, bulk ops moved in --chunk-mib chunks.
// Reports the median, over --reps rounds, of the seconds from issuing the gather to its
// completion on the slowest rank, and of the whole queue's. Run under a launcher, on a slow link
// to see the effect (bench/priority_probe.py sets one up):
//   mpirun -np 2 build/bench/priority_bench [--gather-mfloats 1] [--bulk 3] [--bulk-mfloats 4]
//                                           [--chunk-mib 1] [--reps 5]
// Not a test: nothing fails on a number. Results: docs/benchmarks-compression.md.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "comm/mpi/mpi_comm.h"
#include "util/timer.h"

namespace {

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

double slowest(double s) {
    double worst = 0;
    MPI_Allreduce(&s, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return worst;
}

}  // namespace

int main(int argc, char** argv) {
    double gather_mfloats = 1, bulk_mfloats = 4, chunk_mib = 1;
    int bulk = 3, reps = 5;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string a = argv[i];
        if (a == "--gather-mfloats") gather_mfloats = std::atof(argv[i + 1]);
        if (a == "--bulk-mfloats") bulk_mfloats = std::atof(argv[i + 1]);
        if (a == "--chunk-mib") chunk_mib = std::atof(argv[i + 1]);
        if (a == "--bulk") bulk = std::atoi(argv[i + 1]);
        if (a == "--reps") reps = std::atoi(argv[i + 1]);
    }
    auto comm = zt::mpi_world();  // initializes MPI
    const int n = comm->size(), r = comm->rank();
    const auto g_seg = static_cast<int64_t>(gather_mfloats * 1e6 / n);
    const auto b_seg = static_cast<int64_t>(bulk_mfloats * 1e6 / n);
    std::vector<float> g_send(static_cast<size_t>(g_seg), 1.0f),
        g_recv(static_cast<size_t>(g_seg * n));
    std::vector<std::vector<float>> b_send(static_cast<size_t>(bulk)),
        b_recv(static_cast<size_t>(bulk));
    for (int k = 0; k < bulk; ++k) {
        b_send[static_cast<size_t>(k)].assign(static_cast<size_t>(b_seg * n), 0.5f);
        b_recv[static_cast<size_t>(k)].resize(static_cast<size_t>(b_seg));
    }
    const std::vector<int64_t> g_counts(static_cast<size_t>(n), g_seg),
        b_counts(static_cast<size_t>(n), b_seg);

    struct Mode {
        const char* name;
        int bulk;
        bool urgent;
    };
    const Mode modes[] = {{"alone", 0, false}, {"in order", bulk, false}, {"urgent", bulk, true}};
    if (r == 0)
        std::printf("ranks %d; gather %.3g M floats behind %d reduce-scatters of %.3g M floats; "
                    "chunks %.3g MiB (urgent mode); median of %d rounds, slowest rank\n\n"
                    "| mode | gather issued to done s | queue done s |\n|---|---:|---:|\n",
                    n, gather_mfloats, bulk, bulk_mfloats, chunk_mib, reps);
    for (const Mode& m : modes) {
        comm->set_chunk_bytes(m.urgent ? static_cast<int64_t>(chunk_mib * (1 << 20)) : 0);
        std::vector<double> gather_s, all_s;
        for (int k = -1; k < reps; ++k) {  // round -1 warms up
            MPI_Barrier(MPI_COMM_WORLD);
            const double t0 = zt::now_s();
            std::vector<zt::CommHandle> queued;
            for (int b = 0; b < m.bulk; ++b)
                queued.push_back(comm->reduce_scatter(b_send[static_cast<size_t>(b)].data(),
                                                      b_recv[static_cast<size_t>(b)].data(),
                                                      b_counts, zt::CommType::kF32));
            const double t1 = zt::now_s();
            zt::CommHandle h;
            {
                zt::UrgentScope urgent(comm.get(), m.urgent);
                h = comm->all_gather(g_send.data(), g_recv.data(), g_counts, zt::CommType::kF32);
            }
            h->wait();
            const double t2 = zt::now_s();
            for (auto& q : queued) q->wait();
            const double t3 = zt::now_s();
            const double g = slowest(t2 - t1), a = slowest(t3 - t0);
            if (k >= 0) {
                gather_s.push_back(g);
                all_s.push_back(a);
            }
        }
        if (r == 0)
            std::printf("| %s | %.4f | %.4f |\n", m.name, median(gather_s), median(all_s));
    }
    return 0;
}
