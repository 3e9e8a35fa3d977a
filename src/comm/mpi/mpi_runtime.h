// MPI process state and helpers shared by the MPI backend's files: initialization, the lock that
// serializes MPI calls when the library gives only MPI_THREAD_SERIALIZED, error checking, types.
// Internal to comm/mpi/; the only headers besides mpi_*.cpp that include <mpi.h>.
#pragma once

// The C API only: OpenMPI's and MPICH's mpi.h otherwise pull in the deprecated C++ bindings,
// which live in a library we do not link.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <mutex>

#include "comm/communicator.h"

namespace zt::mpi_detail {

// Initializes MPI once (thread-safe); registers finalization at exit.
void ensure_initialized();
// Held around every MPI call: owns the process-wide mutex when MPI gave less than
// MPI_THREAD_MULTIPLE, else empty.
std::unique_lock<std::mutex> lock();
// Throws zt::Error naming the call and MPI's message when rc is not MPI_SUCCESS.
void check(int rc, const char* call, const char* file, int line);
MPI_Datatype datatype(CommType t);

}  // namespace zt::mpi_detail

#define ZT_MPI(call) ::zt::mpi_detail::check((call), #call, __FILE__, __LINE__)
