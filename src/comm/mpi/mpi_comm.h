// The MPI backend: zerotrain's production engine, over the MPI C API (OpenMPI or MPICH, started by
// mpirun or srun, or a single process with no launcher: an MPI singleton). Every MPI call of a
// communicator happens on its one worker thread, which runs the ops in issue order (urgent ones may
// overtake bulk ones: Note [Urgent ops] in comm/communicator.h) while the caller computes. Reductions use the fixed order of communicator.h, built from point-to-point messages,
// never MPI's own reductions (whose order depends on the algorithm MPI picks).
// This header does not include <mpi.h>.
#pragma once

#include <climits>
#include <cstdint>
#include <memory>
#include <string>

#include "comm/communicator.h"

namespace zt {

struct MpiOptions {
    // Messages longer than this many elements go as several pieces (MPI counts are int). Tests
    // lower it to exercise the splitting.
    int64_t max_piece_elems = INT_MAX;
};

// A new communicator over MPI_COMM_WORLD (a duplicate, so its traffic never meets another's).
// Initializes MPI on first use (MPI_Init_thread, MPI_THREAD_MULTIPLE requested; with only
// MPI_THREAD_SERIALIZED every MPI call is serialized by one process-wide lock); MPI is finalized at
// exit or by mpi_finalize(). Call it from the main thread first.
std::unique_ptr<Communicator> mpi_world(const MpiOptions& options = {});

// True when a launcher started this process (OpenMPI's mpirun, PMI/PMIx, Slurm's srun).
bool launched_by_mpi_launcher();

// Finalizes MPI now if it was initialized (idempotent). Communicators must be destroyed first.
void mpi_finalize();

// Prints why to stderr and aborts every process of the job (MPI_Abort on MPI_COMM_WORLD); exits
// with code when MPI is not running.
[[noreturn]] void mpi_abort(int code, const std::string& why);

}  // namespace zt
