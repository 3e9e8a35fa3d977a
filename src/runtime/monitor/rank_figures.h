// One rank's own figures of a training step, gathered at every rank after the step (rank order)
// so that rank 0 can report them and every rank can see a stop request. Times in seconds:
// step_s = compute_s + comm_s + io_s, where comm_s is the communication the rank waited for
// (exposed: waiting for a slower peer counts here) and io_s is data loading. A rank's busy time,
// step_s - comm_s, is what tells a straggler, since the collectives make every step_s alike.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/communicator.h"
#include "tensor/memory.h"

namespace zt {

struct RankFigures {
    double step_s = 0;
    double comm_s = 0;     // exposed communication
    double io_s = 0;       // data loading
    bool skipped = false;  // non-finite gradients: the step was skipped
    bool stop = false;     // the rank was asked to stop (SIGTERM)
    MemoryStats mem;       // current and peak per category, total peak

    double compute_s() const { return step_s - comm_s - io_s; }
    double busy_s() const { return step_s - comm_s; }
};

// Every rank's figures at every rank, in rank order (collective; comm null: this rank's only).
// With ZT_MONITOR_RANK_LOG=DIR set (tests), each rank also appends its own figures as
// rank_figures_json to DIR/rank_R.jsonl when `log_step` > 0, with "step": log_step.
std::vector<RankFigures> gather_rank_figures(Communicator* comm, const RankFigures& mine,
                                             int64_t log_step);

// {"rank", "step_s", "compute_s", "comm_s", "io_s", "skipped", "mem": {category: bytes, "peak"}}
nlohmann::json rank_figures_json(const RankFigures& f, int rank);

// The median busy time over ranks (the mean of the middle two for an even count).
double median_busy_s(std::span<const RankFigures> ranks);
// Ranks whose busy time is more than `factor` times median_busy_s, in rank order. Empty for one rank.
std::vector<int> find_stragglers(std::span<const RankFigures> ranks, double factor);

// ZT_FAULT_SLOW_RANK=R:S (tests): rank R sleeps S seconds inside each step, as a slow machine
// would compute; 0 for every other rank or when unset.
double slow_rank_delay_s(int rank);

}  // namespace zt
