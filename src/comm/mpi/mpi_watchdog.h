// The MPI backend's side of hang detection (Note [Hang detection], comm/watchdog.h): a duplicate
// communicator that carries only watchdog traffic (state requests, their answers, check_sequence's
// exchange), serviced by the communicator's worker thread. Internal to comm/mpi/.
#pragma once

#include <list>
#include <string>
#include <vector>

#include "comm/mpi/mpi_runtime.h"
#include "comm/watchdog.h"

namespace zt::mpi_detail {

class Watchdog {
public:
    // Takes ownership of wd, a duplicate of the group's communicator `group_comm`.
    Watchdog(MPI_Comm wd, MPI_Comm group_comm, std::string group);
    ~Watchdog();
    Watchdog(const Watchdog&) = delete;
    Watchdog& operator=(const Watchdog&) = delete;

    MPI_Comm comm() const { return wd_; }
    const std::string& group() const { return group_; }

    // Answers every pending state request with `mine` (nonblocking; cheap when there is none).
    void serve(const comm_detail::OpState& mine);
    // The watchdog fired: asks every rank for its state, waits for the answers a bounded time
    // (answering others meanwhile), prints the report on stderr and ends the job (MPI_Abort).
    [[noreturn]] void report_and_abort(const comm_detail::OpState& mine, double waited_s,
                                       double timeout_s);

    // check_sequence's tag for collective #seq on comm().
    static int check_tag(uint64_t seq);

private:
    struct Answer {
        std::array<int64_t, comm_detail::OpState::kWords> words;
        MPI_Request req = MPI_REQUEST_NULL;
    };

    MPI_Comm wd_;
    int rank_ = 0, size_ = 1;
    std::string group_;
    std::vector<int> world_ranks_;  // group rank -> rank in MPI_COMM_WORLD
    std::list<Answer> answers_;     // sends in flight; list: stable buffer addresses
};

}  // namespace zt::mpi_detail
