// Measuring a calibration profile on the running machine (`zerotrain bench calibrate`,
// docs/planner.md): the engine's own GEMM choice per shape class (read from its cache, measured
// when absent), the attention kernel, an elementwise kernel past the caches, collectives over
// the local thread-ranks backend (and the MPI world when one is given) at a few sizes, and
// sequential disk throughput. Each measurement is a fraction of a second, so a calibration takes
// seconds, not minutes; the result is a MachineProfile (profile.h).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "planner/profile.h"

namespace zt {

class Communicator;

struct CalibrateOptions {
    std::vector<int> threads;     // intra-op thread counts; empty: 1 and all cores
    int local_ranks = 2;          // ranks of the local backend's measurement (0: skip)
    Communicator* mpi = nullptr;  // the MPI world when launched under mpirun (every rank calls)
    std::string disk_dir;         // where the disk test writes; "": the cache directory; "-": skip
    int64_t disk_bytes = 128 << 20;  // 128 MiB written, read back, then half of each at once
    double seconds_per_kernel = 0.15;
};

// Measures every rate of the profile. Under MPI every rank of opts.mpi must call it; only rank
// 0's result holds the host's rates (the others return after the MPI collectives).
MachineProfile calibrate_machine(const CalibrateOptions& opts);

// The OpenMP team's costs (ThreadRates::team_region_s, team_min_elems) of every rate entry past
// one thread that lacks them: an empty region 1 ms after the last (Note [A region in a step's
// rhythm]) and the engine's own grain (parallel_grain). Returns how many entries were filled.
int fill_team_costs(MachineProfile& p);

// The collectives of `ranks` local rank threads of one intra-op thread each, as the local
// backend trains when its ranks fill the cores (Note [Collectives at the run's rank count]).
CommProfile measure_local_comm(int ranks, double seconds_per_kernel);

// Each rank's relative speed (Note [Measured rank speeds] in calibrate.cpp): every rank of
// `comm` times the engine's large f32 product at its current thread count, all at once as they
// train, and every rank gets rate_r / the fastest rate, in rank order. Every rank must call it.
std::vector<double> measure_rank_speeds(Communicator& comm);

// The disk under `dir` on the nvme tier's own path (Note [Disk calibration]): write, read and
// both at once of about `bytes`, into p's disk fields; left 0 where dir cannot hold the file.
void measure_disk(const std::string& dir, int64_t bytes, MachineProfile& p);

// A linear fit time = latency + bus_factor x bytes / bus_bytes_per_s to (bytes, seconds) points
// by least squares (latency clamped at 0). Pure, for tests.
CollectiveFit fit_collective(const std::vector<std::pair<double, double>>& points,
                             double bus_factor);

// The profile to plan with. `path` given: that file as it is (another machine's is allowed and
// said). Else the default path's when its identity is this machine's; else, when `measure`, a
// fresh calibration saved there; else nullopt. `said` gets one line on what happened.
std::optional<MachineProfile> profile_for_machine(const std::string& path, bool measure,
                                                  std::string* said);

}  // namespace zt
