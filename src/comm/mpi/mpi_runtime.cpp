// MPI initialization, finalization, abort and error strings (mpi_runtime.h, mpi_comm.h).
#include "comm/mpi/mpi_runtime.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "comm/mpi/mpi_comm.h"
#include "util/error.h"

namespace zt {
namespace mpi_detail {
namespace {

// MPI is process-wide state by nature; this mirrors it (STYLE.md rule 5's one exception).
struct Runtime {
    std::mutex init_mu;
    std::mutex call_mu;
    bool serialize = false;
};

Runtime& runtime() {
    static Runtime rt;
    return rt;
}

const char* thread_level_name(int level) {
    if (level == MPI_THREAD_SINGLE) return "MPI_THREAD_SINGLE";
    if (level == MPI_THREAD_FUNNELED) return "MPI_THREAD_FUNNELED";
    if (level == MPI_THREAD_SERIALIZED) return "MPI_THREAD_SERIALIZED";
    if (level == MPI_THREAD_MULTIPLE) return "MPI_THREAD_MULTIPLE";
    return "an unknown level";
}

// ZT_FAULT_MPI_THREAD_LEVEL=single|funneled|serialized|multiple (tests): the thread support the
// library is taken to have given, so that a library short of it can be tried anywhere.
int fault_thread_level(int provided) {
    const char* v = std::getenv("ZT_FAULT_MPI_THREAD_LEVEL");
    if (!v || !*v) return provided;
    const std::string s = v;
    if (s == "single") return MPI_THREAD_SINGLE;
    if (s == "funneled") return MPI_THREAD_FUNNELED;
    if (s == "serialized") return MPI_THREAD_SERIALIZED;
    if (s == "multiple") return MPI_THREAD_MULTIPLE;
    ZT_FAIL("ZT_FAULT_MPI_THREAD_LEVEL=", s, ": expected single, funneled, serialized or multiple");
}

bool mpi_running() {
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    return init && !fin;
}

}  // namespace

void ensure_initialized() {
    Runtime& rt = runtime();
    std::lock_guard guard(rt.init_mu);
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    ZT_CHECK(!fin, "mpi: MPI was already finalized; make every communicator before mpi_finalize()");
    if (init) return;
    int provided = 0;
    ZT_MPI(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided));
    provided = fault_thread_level(provided);
    if (provided < MPI_THREAD_SERIALIZED)  // each communicator calls MPI from its worker thread
        mpi_abort(1, str_cat("mpi: the MPI library provides thread support ",
                             thread_level_name(provided), "; the MPI backend needs at least "
                             "MPI_THREAD_SERIALIZED (it asks for MPI_THREAD_MULTIPLE), since "
                             "each communicator makes its MPI calls from a worker thread. Use an "
                             "MPI built with thread support (OpenMPI: --enable-mpi-thread-multiple"
                             "; MPICH: --enable-threads=multiple)"));
    rt.serialize = provided < MPI_THREAD_MULTIPLE;
    std::atexit([] { mpi_finalize(); });
}

std::unique_lock<std::mutex> lock() {
    Runtime& rt = runtime();
    if (!rt.serialize) return {};
    return std::unique_lock(rt.call_mu);
}

void check(int rc, const char* call, const char* file, int line) {
    if (rc == MPI_SUCCESS) return;
    char msg[MPI_MAX_ERROR_STRING] = {};
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    throw Error(ErrorKind::kInternal, file, line, str_cat("mpi: ", call, " failed: ", msg));
}

MPI_Datatype datatype(CommType t) {
    switch (t) {
        case CommType::kF32: return MPI_FLOAT;
        case CommType::kBF16: return MPI_UINT16_T;
        case CommType::kF16: return MPI_UINT16_T;
        case CommType::kF64: return MPI_DOUBLE;
        case CommType::kI32: return MPI_INT32_T;
        case CommType::kI64: return MPI_INT64_T;
        case CommType::kU8: return MPI_UINT8_T;
    }
    ZT_FAIL("mpi: unknown CommType ", static_cast<int>(t));
}

}  // namespace mpi_detail

bool launched_by_mpi_launcher() {
    auto set = [](const char* name) { return std::getenv(name) != nullptr; };
    return set("OMPI_COMM_WORLD_SIZE") || set("PMI_SIZE") || set("PMIX_RANK") ||
           (set("SLURM_PROCID") && set("SLURM_NTASKS"));
}

void mpi_finalize() {
    std::lock_guard guard(mpi_detail::runtime().init_mu);
    if (mpi_detail::mpi_running()) MPI_Finalize();
}

void mpi_abort(int code, const std::string& why) {
    std::fprintf(stderr, "zerotrain: aborting the job: %s\n", why.c_str());
    std::fflush(stderr);
    if (mpi_detail::mpi_running()) MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);
}

}  // namespace zt
