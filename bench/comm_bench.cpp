// Comm benchmark: zerotrain's MPI backend (fixed-order point-to-point algorithms, a worker thread
// per communicator) against MPI's own collectives on the same buffers, in the same run, alternately
// (A B A B ...), reporting the median time per op. Run under a launcher:
//   mpirun -np 2 build/bench/comm_bench [--max-mib 64] [--reps 7]
// Not a test: nothing fails on a number. Results: docs/benchmarks-comm.md.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#include "comm/mpi/mpi_comm.h"
#include "util/timer.h"

namespace {

// Median seconds of one call of fn, over reps timed calls after one warm-up; every rank starts
// together (barrier) and the slowest rank's time counts.
void time_op(const std::function<void()>& fn, int reps, std::vector<double>& out) {
    for (int k = -1; k < reps; ++k) {
        MPI_Barrier(MPI_COMM_WORLD);
        const double t0 = zt::now_s();
        fn();
        double dt = zt::now_s() - t0, worst = 0;
        MPI_Allreduce(&dt, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        if (k >= 0) out.push_back(worst);
    }
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
    int64_t max_mib = 64;
    int reps = 7;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (std::strcmp(argv[i], "--max-mib") == 0) max_mib = std::atoll(argv[i + 1]);
        if (std::strcmp(argv[i], "--reps") == 0) reps = std::atoi(argv[i + 1]);
    }
    auto comm = zt::mpi_world();  // initializes MPI
    const int n = comm->size(), r = comm->rank();
    if (r == 0) {
        std::printf("ranks %d; f32; median of %d alternating rounds; time per op in us; "
                    "ratio = ours / MPI (below 1: ours faster)\n\n",
                    n, reps);
        std::printf("| op | bytes | zerotrain us | MPI us | ratio | zerotrain GB/s | MPI GB/s |\n");
        std::printf("|---|---:|---:|---:|---:|---:|---:|\n");
    }
    for (int64_t bytes = 4096; bytes <= max_mib << 20; bytes *= 4) {
        const int64_t count = bytes / 4 / n * n;  // divisible, so MPI's block variants apply
        const int64_t seg = count / n;
        std::vector<float> a(static_cast<size_t>(count)), b(static_cast<size_t>(count));
        for (int64_t i = 0; i < count; ++i) a[static_cast<size_t>(i)] = 1.0f + static_cast<float>(i % 7);
        std::vector<int64_t> counts(static_cast<size_t>(n), seg);
        struct Case {
            const char* name;
            std::function<void()> ours, theirs;
        };
        const int c = static_cast<int>(count), s = static_cast<int>(seg);
        std::vector<Case> cases = {
            {"all_reduce",
             [&] { comm->all_reduce(a.data(), count, zt::CommType::kF32)->wait(); },
             [&] {
                 MPI_Allreduce(MPI_IN_PLACE, a.data(), c, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
             }},
            {"reduce_scatter",
             [&] { comm->reduce_scatter(a.data(), b.data(), counts, zt::CommType::kF32)->wait(); },
             [&] {
                 MPI_Reduce_scatter_block(a.data(), b.data(), s, MPI_FLOAT, MPI_SUM,
                                          MPI_COMM_WORLD);
             }},
            {"all_gather",
             [&] { comm->all_gather(a.data(), b.data(), counts, zt::CommType::kF32)->wait(); },
             [&] {
                 MPI_Allgather(a.data(), s, MPI_FLOAT, b.data(), s, MPI_FLOAT, MPI_COMM_WORLD);
             }},
        };
        for (auto& cs : cases) {
            std::vector<double> ours, theirs;
            for (int k = 0; k < reps; ++k) {  // alternate, so a noisy moment hits both
                time_op(cs.ours, 1, ours);
                time_op(cs.theirs, 1, theirs);
            }
            const double to = median(ours), tt = median(theirs);
            if (r == 0) {
                std::printf("| %s | %lld | %.1f | %.1f | %.2f | %.2f | %.2f |\n", cs.name,
                            static_cast<long long>(count * 4), to * 1e6, tt * 1e6, to / tt,
                            static_cast<double>(count * 4) / to * 1e-9,
                            static_cast<double>(count * 4) / tt * 1e-9);
                std::fflush(stdout);
            }
        }
    }
    comm.reset();
    zt::mpi_finalize();
    return 0;
}
