// The calibration profile of a machine (`zerotrain bench calibrate`, docs/planner.md): the rates
// the cost model turns work into time with, each measured on the running machine (planner/
// calibrate.h), and the machine's identity they hold for. A profile whose identity differs from
// the running machine's is stale: the planner measures again rather than trust it. This file only
// holds, reads and writes profiles; it measures nothing.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace zt {

// One collective's time for a buffer of `bytes` (the per-rank payload as the call takes it), in
// bus bytes, bus_factor(ranks) x bytes, with the ring's bus factor (all-reduce 2 (n - 1) / n,
// reduce-scatter and all-gather (n - 1) / n, send/recv 1), so a fit at one rank count predicts
// others on the same links. With measured points (Note [Collective times between sizes] in
// profile.cpp): interpolated between them; else the line latency_s + bus bytes / bus_bytes_per_s.
struct CollectiveFit {
    double latency_s = 0;
    double bus_bytes_per_s = 0;  // 0: not measured
    // (bus bytes, seconds), ascending in both (set_points makes them so); empty: the line alone.
    std::vector<std::pair<double, double>> points;
    double time_s(double bytes, double bus_factor) const;
    // The measured (bytes, seconds) of the calibration at this bus factor.
    void set_points(const std::vector<std::pair<double, double>>& measured, double bus_factor);
};

// The ring's bus factors (CollectiveFit).
double all_reduce_bus_factor(int ranks);
double shard_bus_factor(int ranks);  // reduce-scatter and all-gather

// What one backend's collectives cost between ranks of one host ("local": ranks as threads;
// "mpi": processes under mpirun). The points are the raw measurements (bytes, seconds).
struct CommProfile {
    std::string backend;  // "local" or "mpi"
    int ranks = 2;        // ranks the fit was measured with
    CollectiveFit all_reduce, reduce_scatter, all_gather, send_recv;
    // More rank threads than cores: what each collective call adds to a step beyond its time
    // alone, the ranks computing between calls (Note [Rendezvous on shared cores],
    // calibrate.cpp); 0 where the ranks had a core each, -1 where it was not measured (a
    // profile from before session 29: measured again when a plan needs this rank count).
    double rendezvous_s = -1;
    nlohmann::json points;  // {"all_reduce": [[bytes, s], ...], ...}
    // Each fit's points from `points` at this rank count's bus factor (a collective without any
    // keeps its line); throws (naming `what`) on a point that is not [bytes, seconds].
    void fit_points(const std::string& what);
};

// Rates at one intra-op thread count.
struct ThreadRates {
    int threads = 1;
    // The engine's chosen GEMM library per dtype (0 f32, 1 bf16) and size class (0 small, 1
    // large), FLOP/s averaged over the training lanes NN, NT and TN (tensor/gemm_select.h).
    double gemm_flops[2][2] = {{0, 0}, {0, 0}};
    double attention_flops = 0;          // causal attention forward + backward, FLOP/s (f32)
    double elementwise_bytes_per_s = 0;  // y = a + b over buffers past the caches
    double op_overhead_s = 0;  // one tiny product (8 x 64 x 64) through the engine's GEMM: the
                               // fixed cost of an op, which decides for tiny micro-batches
    // The OpenMP team's costs at these threads (Note [Team wakes], cost_model.cpp): an empty
    // region's seconds 1 ms after the last (Note [A region in a step's rhythm], calibrate.cpp),
    // and the engine's grain (tensor/threads.h, ParallelGrain::min_elems), the elements from
    // which a kernel loop runs on the team. 0: not measured (one thread, or a profile from
    // before session 28, filled in when a plan first needs them).
    double team_region_s = 0;
    double team_min_elems = 0;
    // The reference product's seconds when these rates were measured (Note [Kernel times at
    // the host's speed now], speed_now.cpp); 0: not timed.
    double speed_ref_s = 0;
};

struct MachineProfile {
    static constexpr int kVersion = 2;  // 2: the disk on the nvme tier's path, mixed rate
    std::string identity;               // profile_identity() of the machine measured
    nlohmann::json machine;          // {"cpu", "cores", "libraries", ...}: for people, not compared
    std::string measured_at;         // UTC, ISO 8601
    double seconds = 0;              // calibration time
    std::vector<ThreadRates> rates;  // ascending threads
    std::vector<CommProfile> comm;
    double disk_write_bytes_per_s = 0;  // 0: not measured
    double disk_read_bytes_per_s = 0;
    // Reads and writes at once, the bytes of both counted (Note [Disk calibration]); 0: not
    // measured (the cost model then takes the slower one-way rate for both directions at once).
    double disk_mixed_bytes_per_s = 0;
    bool disk_direct = false;  // the figures are O_DIRECT's (false: through the page cache)
    std::string disk_dir;
    // Seconds of one kernel call by shape (planner/shape_times.h: the keys, and what is timed),
    // measured when a plan first needs them and kept with the profile.
    std::map<std::string, double> shape_s;
    // The reference product's seconds when each product of shape_s was timed, at its thread
    // count (Note [Kernel times at the host's speed now]); products without one stay as timed.
    std::map<std::string, double> shape_ref_s;
    // The references timed by this process (threads -> seconds; 0: a team without its cores);
    // not saved.
    std::map<int, double> speed_now;
    // Each MPI rank's speed relative to the fastest, measured under mpirun (Note [Measured rank
    // speeds], calibrate.cpp); empty: not measured.
    std::vector<double> rank_speeds;

    // Rates at `threads`, linear between the two nearest measured counts and proportional to
    // the thread count outside them. Needs at least one entry.
    ThreadRates at_threads(int threads) const;
    // The backend's fit measured at the rank count nearest `ranks` (by ratio; ties: the larger;
    // ranks 0: the backend's first), the first fit of any backend when the backend was not
    // measured (nullptr: none). Note [Collectives at the run's rank count] (calibrate.cpp).
    const CommProfile* comm_for(const std::string& backend, int ranks = 0) const;
};

nlohmann::json profile_json(const MachineProfile& p);
// Throws zt::Error (kInput) naming the file and the field when it does not parse.
MachineProfile profile_from_json(const nlohmann::json& j, const std::string& what);

// What a profile is valid for: CPU model and flags, the GEMM libraries and their environment
// (gemm_machine_key), and the core count. Intra-op thread counts are inside the profile.
std::string profile_identity();
// DIR/profile-<16 hex digits of the identity's hash>.json under default_gemm_cache_dir(); ""
// when there is no cache directory.
std::string default_profile_path();

void save_profile(const MachineProfile& p, const std::string& path);
// The profile at path; nullopt when the file does not exist. Throws when it does not parse.
std::optional<MachineProfile> load_profile(const std::string& path);

}  // namespace zt
