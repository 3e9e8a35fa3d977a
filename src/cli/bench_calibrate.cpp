// `zerotrain bench calibrate [--out FILE]`: measures this machine's calibration profile
// (planner/calibrate.h) and saves it where the planner looks (default_profile_path()), or to
// FILE. Under mpirun every rank takes part in the MPI collectives' measurement and times its own
// speed (`plan --rank-speed measured`); rank 0 writes.
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "comm/communicator.h"
#include "comm/mpi/mpi_comm.h"
#include "planner/calibrate.h"
#include "planner/shape_times.h"
#include "tensor/threads.h"
#include "util/error.h"
#include "util/host_load.h"
#include "util/log.h"
#include "util/units.h"

namespace zt::cli {

namespace {

struct CalibrateArgs {
    std::string out;
    std::vector<int> threads;
    int local_ranks = 2;
    std::string disk_dir;
};

std::string rate(double bytes_per_s) { return format_bytes(bytes_per_s) + "/s"; }

void print_profile(const MachineProfile& p, const std::string& path) {
    std::printf("calibration profile (%.1f s)\n", p.seconds);
    for (const ThreadRates& r : p.rates)
        std::printf(
            "  %d threads: GEMM f32 %.1f GFLOP/s (small %.1f), bf16 %.1f (small %.1f); "
            "attention %.1f GFLOP/s; elementwise %s\n",
            r.threads, r.gemm_flops[0][1] / 1e9, r.gemm_flops[0][0] / 1e9, r.gemm_flops[1][1] / 1e9,
            r.gemm_flops[1][0] / 1e9, r.attention_flops / 1e9,
            rate(r.elementwise_bytes_per_s).c_str());
    for (const CommProfile& c : p.comm) {
        auto fit = [](const char* n, const CollectiveFit& f) {
            std::printf("    %-15s latency %8.1f us, bus %s\n", n, f.latency_s * 1e6,
                        rate(f.bus_bytes_per_s).c_str());
        };
        std::printf("  collectives, %s backend, %d ranks:\n", c.backend.c_str(), c.ranks);
        fit("all_reduce", c.all_reduce);
        fit("reduce_scatter", c.reduce_scatter);
        fit("all_gather", c.all_gather);
        fit("send/recv", c.send_recv);
        if (c.rendezvous_s > 0)  // Note [Rendezvous on shared cores]
            std::printf("    each call among ranks computing on shared cores: +%.1f us\n",
                        c.rendezvous_s * 1e6);
    }
    if (p.disk_write_bytes_per_s > 0)
        std::printf("  disk (%s, %s): write %s, read %s, both at once %s\n", p.disk_dir.c_str(),
                    p.disk_direct ? "O_DIRECT" : "page cache",
                    rate(p.disk_write_bytes_per_s).c_str(), rate(p.disk_read_bytes_per_s).c_str(),
                    rate(p.disk_mixed_bytes_per_s).c_str());
    if (!p.rank_speeds.empty()) {
        std::printf("  rank speeds (%zu MPI ranks, each over the fastest):", p.rank_speeds.size());
        for (size_t r = 0; r < p.rank_speeds.size(); ++r)
            std::printf("%s %.2f", r ? "," : "", p.rank_speeds[r]);
        std::printf("\n");
    }
    std::printf("saved %s\n", path.c_str());
}

int run_calibrate(const CalibrateArgs& a) {
    CalibrateOptions o;
    o.threads = a.threads;
    o.local_ranks = a.local_ranks;
    o.disk_dir = a.disk_dir;
    std::unique_ptr<Communicator> world;
    if (launched_by_mpi_launcher()) world = mpi_world();
    o.mpi = world.get();
    const bool root = !world || world->rank() == 0;
    const HostLoadProbe load;  // Note [Shapes timed on a quiet host]: rates of a busy host are low
    const MachineProfile p = calibrate_machine(o);
    if (!root) return 0;
    // Under mpirun the other ranks are other processes: no verdict there.
    if (const double others = load.other_cores(); !world && others > kBusyOtherCores)
        log_warn("bench calibrate: other processes used ", cores_text(others),
                 " while it measured; its rates are likely low (measure again on a quiet ",
                 "machine)");
    const std::string path = a.out.empty() ? default_profile_path() : a.out;
    ZT_CHECK(!path.empty(),
             "bench calibrate: no cache directory (set HOME or ZT_CACHE_DIR); "
             "give --out FILE");
    save_profile(p, path);
    print_profile(p, path);
    return 0;
}

}  // namespace

void add_bench_calibrate(CLI::App* bench,
                         std::vector<std::pair<CLI::App*, std::function<int()>>>& runners) {
    auto args = std::make_shared<CalibrateArgs>();  // owned by the runner
    CalibrateArgs& a = *args;
    CLI::App* c = bench->add_subcommand(
        "calibrate",
        "measure the rates the planner's cost model uses (GEMM, attention, memory "
        "bus, collectives, disk) and save them as this machine's profile");
    c->add_option("--out", a.out, "profile file (default ~/.cache/zerotrain/profile-<id>.json)");
    c->add_option("--threads", a.threads, "intra-op thread counts to measure (default 1 and all)")
        ->check(CLI::PositiveNumber);
    c->add_option("--local-ranks", a.local_ranks,
                  "ranks of the local backend's collective measurement (default 2; 0: skip)")
        ->check(CLI::NonNegativeNumber);
    c->add_option("--disk-dir", a.disk_dir,
                  "directory of the disk test (default the cache directory; \"-\": skip)");
    runners.emplace_back(c, [args] { return run_calibrate(*args); });
}

}  // namespace zt::cli
