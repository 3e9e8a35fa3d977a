// Shared state of a local group (local_comm.h): a barrier, the per-op pointers ranks publish, the
// point-to-point mailboxes, and the abort flag. One mutex and condition variable (the Domain) serve
// a world group and every group split from it, so one abort wakes every waiter in all of them.
// Internal to comm/local/.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "comm/communicator.h"
#include "comm/detail.h"
#include "comm/watchdog.h"

namespace zt::local_detail {

// A receive posted before its message arrived; completed by the matching send.
struct PendingRecv {
    void* buf = nullptr;
    int64_t count = 0;
    CommType type = CommType::kF32;
    int src_world = 0;
    double t_issue = 0;
    std::shared_ptr<comm_detail::Work> work;
    comm_detail::StatsRecorder* stats = nullptr;
};

// A message sent before its receive was posted (the send completed at once; the bytes live here).
struct BufferedMsg {
    std::vector<uint8_t> bytes;
    int64_t count = 0;
    CommType type = CommType::kF32;
};

struct Mailbox {
    std::vector<BufferedMsg> msgs;  // FIFO
    std::vector<PendingRecv> recvs;  // FIFO
};

struct Domain {
    std::mutex mu;
    std::condition_variable cv;
    bool aborted = false;
    std::string why;
    std::vector<bool> exited;  // by world rank: returned from run_local_ranks' fn, queue drained
    uint64_t next_group_id = 0;
    // (group id, src rank, dst rank, tag) -> mailbox
    std::map<std::tuple<uint64_t, int, int, int>, Mailbox> mail;

    // Under mu: marks the domain failed, fails every pending receive and wakes every waiter.
    void abort_locked(const std::string& msg);
    void throw_if_aborted_locked() const;
};

// What a rank publishes for one collective: its buffers and arguments, read by the other ranks
// between the op's barriers.
struct Post {
    const void* in = nullptr;
    void* out = nullptr;
    const std::vector<int64_t>* counts = nullptr;
    int64_t count = 0;
    CommType type = CommType::kF32;
    int a = 0, b = 0;  // op-specific (root; split color and key)
};

// What a barrier needs for hang detection (Note [Hang detection]).
struct BarrierWatch {
    double start = 0;      // now_s() when the op started on the worker
    double timeout_s = 0;  // 0: wait without limit
    bool check_sequence = false;
};

struct Group {
    std::shared_ptr<Domain> dom;
    uint64_t id = 0;
    std::string name;  // "world", "world/split1(color 0)": for reports
    int n = 0;
    std::vector<int> world_ranks;  // group rank -> world rank
    std::vector<Post> posts;       // by group rank, valid between an op's barriers
    std::vector<comm_detail::OpState> cur;  // by group rank, under dom->mu: the watchdog's view
    // Barrier: ranks here in the current generation.
    std::vector<char> here;
    int arrived = 0;
    uint64_t generation = 0;
    // Splits in progress: (split sequence number, color) -> the new group and how many fetched it.
    std::map<std::pair<uint64_t, int>, std::pair<std::shared_ptr<Group>, int>> splits;

    Group(std::shared_ptr<Domain> d, std::vector<int> world, std::string group_name);
    // Blocks until every rank of the group has arrived; throws if the domain is aborted or a rank
    // it waits for has exited. Aborts the domain with the watchdog's report when the ranks are in
    // different collectives, or when the wait passes w.timeout_s.
    void barrier(int rank, const BarrierWatch& w);

private:
    void check_same_op_locked(const BarrierWatch& w);
    [[noreturn]] void time_out_locked(int rank, const BarrierWatch& w);
};

}  // namespace zt::local_detail
