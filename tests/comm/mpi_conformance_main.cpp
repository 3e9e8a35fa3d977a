// The comm conformance suite (conformance.h, conformance_priority.h) on the MPI backend, as one
// MPI program: run it with no launcher (an MPI singleton) or under mpirun/srun. Registered in
// ctest as comm.mpi_np1/2/4.
// Usage: mpi_conformance [--expect-size N] [--expect-launcher 0|1]
// Exits 0 when every check passes on every rank; a failing rank aborts the whole job.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "comm/conformance.h"
#include "comm/conformance_priority.h"
#include "comm/mpi/mpi_comm.h"
#include "tensor/threads.h"

namespace {

void run_suite(zt::Communicator& c, const char* label) {
    for (const auto* list : {&zt::conformance::checks(), &zt::conformance::priority_checks()}) {
        for (const auto& check : *list) {
            check.fn(c);
            c.barrier()->wait();
            if (c.rank() == 0) std::printf("ok  %-26s %s, %d ranks\n", check.name, label, c.size());
        }
    }
}

}  // namespace

int main(int argc, char** argv) {
    int expect_size = -1, expect_launcher = -1;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (std::strcmp(argv[i], "--expect-size") == 0) expect_size = std::atoi(argv[i + 1]);
        if (std::strcmp(argv[i], "--expect-launcher") == 0)
            expect_launcher = std::atoi(argv[i + 1]);
    }
    zt::set_num_threads(1);
    int rank = -1;
    try {
        const bool launched = zt::launched_by_mpi_launcher();
        auto world = zt::mpi_world();
        rank = world->rank();
        ZT_CHECK(world->backend() == "mpi", "backend ", world->backend());
        ZT_CHECK(expect_size < 0 || world->size() == expect_size, "world size ", world->size(),
                 ", expected ", expect_size);
        ZT_CHECK(expect_launcher < 0 || launched == (expect_launcher == 1),
                 "launched_by_mpi_launcher() is ", launched, ", expected ", expect_launcher);
        run_suite(*world, "default pieces");
        // Messages cut into pieces of 7 elements: the splitting that keeps MPI's int counts safe.
        auto pieces = zt::mpi_world(zt::MpiOptions{.max_piece_elems = 7});
        run_suite(*pieces, "7-element pieces");
        pieces.reset();
        world.reset();
        zt::mpi_finalize();
    } catch (const std::exception& e) {
        zt::mpi_abort(1, zt::str_cat("rank ", rank, ": ", e.what()));
    }
    if (rank == 0) std::printf("mpi conformance: all checks passed\n");
    return 0;
}
