// Hang detection shared by the backends: what a rank is doing on one communicator (OpState), the
// report that names every rank's state, and the fault injection its tests use. Internal to comm/.
//
// Note [Hang detection]
// Every collective of a communicator (barrier and split included; send and recv are not
// collectives) gets the next sequence number, #1 first, when it is issued. While it runs, the
// rank's OpState says which (kind, #, count, type). When a collective has waited timeout_s, the
// rank that noticed collects the OpState of every rank of the group and reports them grouped:
//   comm watchdog: collective mismatch on group world (4 ranks): rank 3 is in all_gather #812
//   (1024 f32), ranks 0-2 in reduce_scatter #812 (4096 f32); ...
// - MPI: a rank stuck in one collective cannot take part in another, so the states travel on a
//   third duplicate communicator that every worker's poll loop services (MPI_Iprobe for a request,
//   MPI_Isend of its OpState), idle workers every kIdleServiceS. The rank that timed out waits a
//   bounded time for the answers (ranks that do not answer are named), prints the report and ends
//   the job with MPI_Abort, so that a supervisor can restart it. Collective messages carry a tag
//   made from (#, kind), so a rank in another collective never matches them: a mismatch hangs and
//   is reported instead of exchanging wrong data.
// - local: the states are shared memory. Ranks that all wait in collectives of one group but not
//   the same one fail at once; otherwise the timeout fails every rank's ops with the report.
// - check_sequence: before each collective the ranks exchange their OpState; a mismatch fails the
//   op on every rank at once with the same grouped message.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace zt::comm_detail {

constexpr int kOpSplit = kCollectiveKindCount;  // OpState::op of a split, after the kinds
constexpr double kIdleServiceS = 0.01;          // 10 ms: an idle MPI worker answers this often

struct OpState {
    bool active = false;  // in the collective `seq`; else idle, `seq` the last one started
    int op = -1;          // a CollectiveKind value or kOpSplit; -1: none started yet
    uint64_t seq = 0;
    int64_t count = 0;    // elements (the total of a counts vector)
    CommType type = CommType::kU8;
    int64_t root = -1;    // broadcast's root, else -1
    bool count_agrees = true;  // false where ranks pass different counts (all_to_all)

    // Wire form for the MPI backend.
    static constexpr int kWords = 7;
    std::array<int64_t, kWords> encode() const;
    static OpState decode(const std::array<int64_t, kWords>& w);
};

const char* op_name(int op);  // "all_reduce", ..., "split"
// "reduce_scatter #812 (4096 f32)", "no collective (last: all_gather #811)".
std::string describe(const OpState& s);
// Same collective: kind and number; with `full`, also count, type and root.
bool same_op(const OpState& a, const OpState& b, bool full);

// One entry per group rank; answered false: the rank did not answer in time.
struct RankState {
    bool answered = false;
    OpState state;
};
// "rank 3 is in all_gather #812 (1024 f32), ranks 0-2 in reduce_scatter #812 (4096 f32)": ranks
// grouped by state, smallest group first.
std::string format_states(const std::vector<RankState>& states);
// "ranks 0-2,5": sorted ranks as ranges.
std::string format_ranks(const std::vector<int>& ranks);

struct HangInfo {
    std::string group;            // "world", "world/split1(color 0)"
    std::vector<int> world_ranks;  // group rank -> world rank
    int rank = 0;                 // the reporting rank (group rank)
    double waited_s = 0;
    double timeout_s = 0;
};
// The watchdog's full report; names the mismatch when states differ.
std::string hang_report(const HangInfo& info, const std::vector<RankState>& states);
// "<who>: collective mismatch on group G: rank 3 is in all_gather #812 (...), ranks 0-2 in ...":
// what each rank issued (check_sequence, and the local backend's barrier).
std::string sequence_mismatch(const char* who, const std::string& group,
                              const std::vector<OpState>& issued);

// Seconds the MPI watchdog waits for the other ranks' answers: a quarter of the timeout, within
// [0.5, 10].
double answer_wait_s(double timeout_s);

// Fault injection for tests: ZT_FAULT_SKIP_COLLECTIVE=<world rank>:<seq> makes that rank skip the
// collective that would be #seq on each of its communicators (once): the op returns a completed
// handle without communicating and takes no number, as if the program had not issued it.
struct FaultSkip {
    int world_rank = -1;  // -1: no fault
    uint64_t seq = 0;
};
FaultSkip fault_skip_from_env();

}  // namespace zt::comm_detail
