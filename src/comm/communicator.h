// Communicator: the collectives zerotrain's parallel layer is built on, over one group of ranks.
// Backends: mpi/ (the production engine: OpenMPI or MPICH through the MPI C API) and local/ (ranks
// as threads of one process, for tests and quick experiments). Both pass one conformance suite
// (tests/comm/).
//
// Semantics shared by every backend:
// - Every op is asynchronous: it is queued and returns a handle; wait() blocks until it completes
//   (and rethrows its error, a zt::Error). Buffers must stay valid and untouched until then. Ops
//   of one communicator run in the order they were issued (urgent ones may overtake: Note [Urgent
//   ops]), and every rank of the group issues the same collectives in the same order (as in MPI).
// - Reductions are sums with a fixed order: element i of the result is
//   ((x_0[i] + x_1[i]) + x_2[i]) + ... in rank order, accumulated in f32 (f64 for kF64) and, for
//   bf16/f16, rounded once at the end. So a repeated run gives the same bits, and all_reduce gives
//   exactly the bits of reduce_scatter followed by all_gather (Note [Fixed-order reduction]).
// - Counts are in elements of the given type. `counts` vectors have one entry per rank; entries
//   may be zero and need not be equal.
// - Hang detection (Note [Hang detection], comm/watchdog.h): collectives are numbered per
//   communicator (#1, #2, ...); one that waits past timeout_s reports what every rank of the group
//   is in and ends the job (MPI) or fails every rank's ops (local).
// - Priority (Note [Urgent ops]): an op issued while set_urgent(true) holds may overtake bulk ops
//   issued before it; bulk ops over set_chunk_bytes move in chunks, so it waits for a few at most.
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

    // Note [Urgent ops]
    // Priority between the transfers of one communicator (comm.priority, docs/compression.md).
    // An op issued while set_urgent(true) holds is urgent, every other op is bulk. Urgent ops run
    // in issue order among themselves, bulk ops too; an urgent op does not wait for the bulk ops
    // issued before it that have not started, and starts beside a running bulk op that moves in
    // chunks (set_chunk_bytes); so the transfer the computation needs first (the next module's
    // ZeRO-3 gathers, embedding rows) waits for the few chunks of gradient traffic in flight
    // instead of every reduction queued before it. Both stay in progress until done, so ranks
    // that reach the urgent op at different chunk boundaries, or a rank that waits for the bulk
    // op before issuing the urgent one, cannot deadlock. Urgency changes when bytes move, never
    // which bytes, their messages or the bits, and ranks may disagree about it. Only all_reduce,
    // reduce_scatter, all_gather and all_to_all can be urgent (the others ignore it). A caller
    // must not assume that a bulk op issued before an urgent one is done when the urgent one is.
    // The MPI backend implements it (Note [Two collectives in flight] in comm/mpi/mpi_comm.cpp,
    // Note [Chunked ops] in comm/mpi/mpi_chunks.h); the local backend runs every op in issue
    // order (its collectives meet at barriers and finish at once, there is no link to share), so
    // urgency and chunks are accepted there and change nothing. set_urgent returns the previous
    // setting (UrgentScope restores it). It applies to ops issued afterwards from any thread; set
    // it from the thread that issues.
    virtual bool set_urgent(bool on) {
        (void)on;
        return false;
    }
    // Bulk all_reduce, reduce_scatter and all_gather over more than `bytes` (of the whole vector:
    // count or sum(counts) elements) move in chunks of about that size, a few in flight at a
    // time; 0 (the default): whole. Applies to ops issued afterwards and is inherited by
    // communicators split from this one later. It decides how the messages are cut: set the same
    // value on every rank at the same point of the program.
    virtual void set_chunk_bytes(int64_t bytes) { (void)bytes; }
};

// The ops issued on `c` while in scope are urgent (Note [Urgent ops]) when `on`; restores the
// previous setting. c may be null (one rank: nothing to issue).
class UrgentScope {
  public:
    explicit UrgentScope(Communicator* c, bool on = true) : c_(on ? c : nullptr) {
        if (c_) prev_ = c_->set_urgent(true);
    }
    ~UrgentScope() {
        if (c_) c_->set_urgent(prev_);
    }
    UrgentScope(const UrgentScope&) = delete;
    UrgentScope& operator=(const UrgentScope&) = delete;

  private:
    Communicator* c_;
    bool prev_ = false;
};

}  // namespace zt
