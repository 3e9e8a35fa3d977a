// Hang detection on the MPI backend (Note [Hang detection]), as one MPI program for ctest
// (comm.mpi_watchdog_np4, comm.mpi_check_sequence_np4): every rank issues all_reduce #1,
// reduce_scatter #2, all_gather #3, barrier #4, with the given timeout and check_sequence. Run with
// ZT_FAULT_SKIP_COLLECTIVE=3:2, rank 3 skips #2, so the job must end (MPI_Abort) with a report on
// stderr naming "rank 3 is in all_gather #2 ..., ranks 0-2 in reduce_scatter #2 ..." instead of
// hanging. Without the fault it exits 0.
// Usage: mpi_watchdog [--timeout S] [--check-sequence]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "comm/mpi/mpi_comm.h"
#include "util/error.h"

int main(int argc, char** argv) {
    double timeout_s = 2;
    bool check = false;
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--timeout") == 0 && i + 1 < argc)
            timeout_s = std::atof(argv[++i]);
        if (std::strcmp(argv[i], "--check-sequence") == 0) check = true;
    }
    int rank = -1;
    try {
        auto world = zt::mpi_world();
        rank = world->rank();
        world->set_timeout(timeout_s);
        world->set_check_sequence(check);
        const int n = world->size();
        std::vector<float> a(static_cast<size_t>(3 * n), 1.0f), b(3);
        world->all_reduce(a.data(), 3 * n, zt::CommType::kF32)->wait();
        world
            ->reduce_scatter(a.data(), b.data(), std::vector<int64_t>(static_cast<size_t>(n), 3),
                             zt::CommType::kF32)
            ->wait();
        world
            ->all_gather(b.data(), a.data(), std::vector<int64_t>(static_cast<size_t>(n), 3),
                         zt::CommType::kF32)
            ->wait();
        world->barrier()->wait();
        world.reset();
        zt::mpi_finalize();
    } catch (const std::exception& e) {
        zt::mpi_abort(1, zt::str_cat("rank ", rank, ": ", e.what()));
    }
    if (rank == 0) std::printf("mpi watchdog: no hang\n");
    return 0;
}
