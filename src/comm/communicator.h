// Communicator: the collectives zerotrain's parallel layer is built on, over one group of ranks.
// Backends: mpi/ (the production engine: OpenMPI or MPICH through the MPI C API) and local/ (ranks
// as threads of one process, for tests and quick experiments). Both pass one conformance suite
// (tests/comm/).
//
// Semantics shared by every backend:
// - Every op is asynchronous: it is queued and returns a handle; wait() blocks until it completes
//   (and rethrows its error, a zt::Error). Buffers must stay valid and untouched until then. Ops
//   of one communicator run in the order they were issued, and every rank of the group issues the
//   same collectives in the same order (as in MPI).
// - Reductions are sums with a fixed order: element i of the result is
//   ((x_0[i] + x_1[i]) + x_2[i]) + ... in rank order, accumulated in f32 (f64 for kF64) and, for
//   bf16/f16, rounded once at the end. So a repeated run gives the same bits, and all_reduce gives
//   exactly the bits of reduce_scatter followed by all_gather (Note [Fixed-order reduction]).
// - Counts are in elements of the given type. `counts` vectors have one entry per rank; entries
//   may be zero and need not be equal.
// - Hang detection (Note [Hang detection], comm/watchdog.h): collectives are numbered per
//   communicator (#1, #2, ...); one that waits past timeout_s reports what every rank of the group
//   is in and ends the job (MPI) or fails every rank's ops (local).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace zt {

// Seconds a collective may wait for the other ranks before the watchdog reports a hang
// (comm.timeout_s). Long enough for a rank to wait out another's checkpoint write, evaluation or
// first-step warm-up; PyTorch's NCCL watchdog uses the same 10 minutes.
constexpr double kDefaultCommTimeoutS = 600;

enum class CommType : uint8_t { kF32, kBF16, kF16, kF64, kI32, kI64, kU8 };
size_t comm_type_size(CommType t);
const char* comm_type_name(CommType t);

enum class CollectiveKind : uint8_t {
    kAllReduce,
    kReduceScatter,
    kAllGather,
    kBroadcast,
    kAllToAll,
    kSend,
    kRecv,
    kBarrier,
};
constexpr int kCollectiveKindCount = 8;
const char* collective_kind_name(CollectiveKind k);  // "all_reduce", "reduce_scatter", ...

// Per collective kind, since the communicator was made (or the last reset): how many ops, bytes
// this rank sent, and seconds from issue to completion. Those seconds overlap when ops are in
// flight together; busy_s counts each wall-clock second once: the time during which at least one
// of this rank's ops was in flight (the union of their issue-to-completion intervals), the total
// that the time a caller waited (exposed) is a part of.
struct CommStats {
    int64_t count[kCollectiveKindCount] = {};
    int64_t bytes_sent[kCollectiveKindCount] = {};
    double seconds[kCollectiveKindCount] = {};
    double busy_s = 0;
};

// A handle to an issued op. wait() may be called more than once; a destroyed handle does not
// cancel its op.
class CommWork {
  public:
    virtual ~CommWork() = default;
    virtual void wait() = 0;  // blocks until done; rethrows the op's error
    virtual bool test() = 0;  // true when done (wait() then returns at once)
    // The caller now needs the op and will poll test() until it is done (wait() says so itself):
    // a backend that polls slowly for ops nobody needs yet polls this one fast (Note [Idle
    // polling], comm/mpi/mpi_comm.cpp). A hint; no effect on the result.
    virtual void need() {}
};
using CommHandle = std::shared_ptr<CommWork>;

class Communicator {
  public:
    virtual ~Communicator() = default;
    virtual int rank() const = 0;
    virtual int size() const = 0;
    virtual std::string backend() const = 0;  // "mpi" or "local"

    // In place: buf (count elements) becomes the sum over ranks.
    virtual CommHandle all_reduce(void* buf, int64_t count, CommType t) = 0;
    // send holds sum(counts) elements; recv (counts[rank()] elements) gets this rank's segment of
    // the sum, segment r starting at counts[0] + ... + counts[r-1]. recv may not alias send.
    virtual CommHandle reduce_scatter(const void* send, void* recv, std::vector<int64_t> counts,
                                      CommType t) = 0;
    // send holds counts[rank()] elements; recv (sum(counts)) gets rank r's at segment r. send may
    // alias recv's own segment (in place).
    virtual CommHandle all_gather(const void* send, void* recv, std::vector<int64_t> counts,
                                  CommType t) = 0;
    virtual CommHandle broadcast(void* buf, int64_t count, CommType t, int root) = 0;
    // send_counts[r] elements go to rank r (segments of send in rank order); recv_counts[r]
    // elements come from rank r. Every pair must agree (send_counts[j] on rank i equals
    // recv_counts[i] on rank j).
    virtual CommHandle all_to_all(const void* send, std::vector<int64_t> send_counts, void* recv,
                                  std::vector<int64_t> recv_counts, CommType t) = 0;
    virtual CommHandle send(const void* buf, int64_t count, CommType t, int peer, int tag) = 0;
    virtual CommHandle recv(void* buf, int64_t count, CommType t, int peer, int tag) = 0;
    virtual CommHandle barrier() = 0;

    // A communicator over the ranks that pass the same color, ordered by (key, rank), like
    // MPI_Comm_split. Collective over this communicator.
    virtual std::unique_ptr<Communicator> split(int color, int key) = 0;

    virtual CommStats stats() const = 0;
    virtual void reset_stats() = 0;

    // Hang detection (Note [Hang detection]). Both apply to collectives issued afterwards and are
    // inherited by communicators split from this one later. Set them at the same point of the
    // program on every rank.
    // seconds > 0: a collective that waits longer reports every rank's state and ends the job; 0:
    // no limit.
    virtual void set_timeout(double seconds) = 0;
    // on: before each collective the ranks exchange (kind, sequence number, count, type); a
    // mismatch fails at once on every rank, naming what each issued. A debugging aid: one more
    // small message per rank pair and collective.
    virtual void set_check_sequence(bool on) = 0;
};

}  // namespace zt
