#include "planner/calibrate.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <thread>

#include "comm/communicator.h"
#include "comm/local/local_comm.h"
#include "offload/nvme_store.h"
#include "planner/speed_now.h"
#include "tensor/gemm.h"
#include "tensor/gemm_machine.h"
#include "tensor/kernels/attention.h"
#include "tensor/kernels/elementwise.h"
#include "tensor/peak_kernels.h"
#include "tensor/tensor.h"
#include "tensor/threads.h"
#include "util/error.h"
#include "util/host_memory.h"
#include "util/timer.h"

namespace zt {

namespace {

// The engine's chosen library per class (its cached or measured choice), measured again now on
// the class's shapes: the rates in the choice file were taken whenever it was made, perhaps on
// a busy machine, and only had to rank the libraries. Averaged over the training lanes NN, NT, TN.
void gemm_rates(ThreadRates& r) {
    const GemmChoice& c = current_gemm_choice();
    for (int d = 0; d < 2; ++d)
        for (int z = 0; z < kGemmSizeCount; ++z) {
            double sum = 0;
            int n = 0;
            for (GemmTrans t : {GemmTrans::kNN, GemmTrans::kNT, GemmTrans::kTN}) {
                const GemmClass cls{d == 0 ? DType::kF32 : DType::kBF16, t,
                                    static_cast<GemmSize>(z)};
                const double rate = measure_gemm_class(c.library_for(cls), cls);
                if (rate > 0) {
                    sum += rate;
                    ++n;
                }
            }
            r.gemm_flops[d][z] = n > 0 ? sum / n : 0;
        }
    // bf16 classes unsupported here (no measured rate): bf16 runs widened at f32's speed.
    for (int z = 0; z < 2; ++z)
        if (r.gemm_flops[1][z] <= 0) r.gemm_flops[1][z] = r.gemm_flops[0][z];
}

// Causal attention forward + backward on f32, counted as the model counts it (Note [Counting
// FLOPs] in models/gpt/gpt_flops.cpp): 4 N T C forward, twice that backward, N = B T.
double attention_rate(double min_s) {
    const kernels::AttentionShape s{2, 256, 256, 4};
    const int64_t n = s.B * s.T * s.C;
    std::vector<float> qkv(3 * n), out(n), dout(n), dqkv(3 * n), lse(s.B * s.H * s.T);
    for (size_t i = 0; i < qkv.size(); ++i) qkv[i] = static_cast<float>((i * 7919) % 97) * 1e-3f;
    std::fill(dout.begin(), dout.end(), 1e-3f);
    std::vector<char> ws(static_cast<size_t>(kernels::attention_workspace_bytes(s, num_threads())));
    const double secs = seconds_per_call(
        [&] {
            kernels::attention_forward(qkv.data(), out.data(), lse.data(), s, ws.data());
            kernels::attention_backward(qkv.data(), out.data(), dout.data(), lse.data(),
                                        dqkv.data(), s, ws.data());
        },
        min_s);
    const double flops = 12.0 * static_cast<double>(n) * static_cast<double>(s.T);
    return flops / secs;
}

// y = a + b over f32 buffers of 16 M elements (64 MiB each, past any L3 here): 12 bytes per
// element moved.
double elementwise_rate(double min_s) {
    MemoryPool pool;
    const int64_t n = int64_t{16} << 20;
    Tensor a = Tensor::zeros(pool, {n}, DType::kF32, MemCategory::kWorkspace);
    Tensor b = Tensor::zeros(pool, {n}, DType::kF32, MemCategory::kWorkspace);
    Tensor y = Tensor::zeros(pool, {n}, DType::kF32, MemCategory::kWorkspace);
    const double secs = seconds_per_call([&] { kernels::add(a, b, y); }, min_s);
    return 12.0 * static_cast<double>(n) / secs;
}

// Seconds of one tiny product through the engine's GEMM (its chosen library for f32 small NT,
// the forward lane): a call's fixed cost.
double op_overhead(double min_s) {
    const int64_t m = 8, n = 64, k = 64;
    std::vector<float> a(m * k, 0.01f), b(n * k, 0.02f), c(m * n, 0.0f);
    return seconds_per_call(
        [&] {
            gemm(m, n, k, 1.0f, {a.data(), k, false}, {b.data(), k, true}, DType::kF32, 0.0f,
                 c.data(), n, DType::kF32);
        },
        min_s);
}

// The sizes each collective is timed at (bytes of the per-rank buffer), the last two cold.
constexpr int64_t kCommSizes[] = {4 << 10, 256 << 10, 4 << 20, 16 << 20, 64 << 20, 128 << 20};
constexpr int64_t kColdCommBytes = 64 << 20;

// Note [Large collectives timed cold]
// Timed back to back, a collective's buffers stay in the caches between calls: on the 2-vCPU
// Xeon of session 30 (480 MiB of L3) the 16 MiB all-reduce of two ranks took 2.2 ms, so GPT
// config S's 118 MB gradient all-reduce was predicted at 15 ms, where the step's measured 30-48
// ms (and GPT M's 500 MB one at four ranks 217 ms predicted, 452 measured): a step writes its
// gradients over a backward that streams hundreds of megabytes of activations, and its ZeRO-3
// shards were last touched by the previous optimizer step, so its large collectives read and
// write memory. So the sizes from 64 MiB are timed cold: before each call every rank writes
// over a buffer of its own of twice the last-level cache over the ranks (32 MiB to 1 GiB; 480
// MiB each for two ranks here), then all meet at a barrier and the call alone is timed; the
// median of three calls. Two cold points, so that sizes past them extrapolate at the cold rate
// (Note [Collective times between sizes], profile.cpp); the buckets of an overlapped reduction
// (a few MiB, reduced as soon as written) stay on the warm points below 16 MiB.
int64_t eviction_bytes(int ranks) {
    const long llc = ::sysconf(_SC_LEVEL3_CACHE_SIZE);
    const int64_t cache = llc > 0 ? static_cast<int64_t>(llc) : int64_t{32} << 20;
    return std::clamp<int64_t>(2 * cache / std::max(1, ranks), int64_t{32} << 20, int64_t{1} << 30);
}

// Whether `ranks` ranks of this host hold a cold size's buffers and evictions in a quarter of
// its memory (else the cold points are left out, the warm ones serve).
bool cold_fits(int ranks, int64_t bytes) {
    const double need =
        static_cast<double>(ranks) * static_cast<double>(2 * bytes + eviction_bytes(ranks));
    return need <= 0.25 * static_cast<double>(host_memory_bytes());
}

// Times all-reduce, reduce-scatter, all-gather and a send/recv pair on `comm` (every rank
// calls); rank 0's times are returned (each op ends with the slowest rank anyway).
CommProfile measure_comm(Communicator& comm, double min_s) {
    const int n = comm.size();
    CommProfile p;
    p.backend = comm.backend();
    p.ranks = n;
    std::vector<std::pair<double, double>> ar, rs, ag, sr;
    std::vector<char> evict;  // Note [Large collectives timed cold]
    for (int64_t bytes : kCommSizes) {
        if (bytes >= kColdCommBytes && !cold_fits(n, bytes)) break;
        const int64_t count = bytes / 4 / n * n;  // f32 elements, a multiple of n
        std::vector<float> buf(count, 1.0f), recv(count, 0.0f);
        const std::vector<int64_t> counts(n, count / n);
        // Every rank runs the same number of iterations: rank 0 decides, broadcast.
        auto timed = [&](auto&& op) {
            op();
            int64_t iters = 1;
            {
                Stopwatch sw;
                op();
                const double one = std::max(sw.elapsed_s(), 1e-6);
                int64_t it = std::clamp<int64_t>(static_cast<int64_t>(min_s / 4 / one), 2, 200);
                comm.broadcast(&it, 1, CommType::kI64, 0)->wait();
                iters = it;
            }
            comm.barrier()->wait();
            Stopwatch sw;
            for (int64_t i = 0; i < iters; ++i) op();
            return sw.elapsed_s() / static_cast<double>(iters);
        };
        // Note [Large collectives timed cold]: the call alone after this rank's eviction.
        auto timed_cold = [&](auto&& op) {
            if (evict.empty()) evict.assign(static_cast<size_t>(eviction_bytes(n)), 0);
            op();
            std::vector<double> s;
            for (int i = 0; i < 3; ++i) {
                std::memset(evict.data(), i + 1, evict.size());
                comm.barrier()->wait();
                Stopwatch sw;
                op();
                s.push_back(sw.elapsed_s());
            }
            std::sort(s.begin(), s.end());
            return s[1];
        };
        auto time_op = [&](auto&& op) {
            return bytes >= kColdCommBytes ? timed_cold(op) : timed(op);
        };
        const double b = static_cast<double>(count) * 4;
        ar.emplace_back(
            b, time_op([&] { comm.all_reduce(buf.data(), count, CommType::kF32)->wait(); }));
        rs.emplace_back(
            b, time_op([&] {
                comm.reduce_scatter(buf.data(), recv.data(), counts, CommType::kF32)->wait();
            }));
        ag.emplace_back(
            b, time_op([&] {
                comm.all_gather(buf.data(), recv.data(), counts, CommType::kF32)->wait();
            }));
        // Ping-pong between ranks 0 and 1: half a round trip is one message.
        const double rt = time_op([&] {
            if (comm.rank() == 0) {
                comm.send(buf.data(), count, CommType::kF32, 1, 7)->wait();
                comm.recv(recv.data(), count, CommType::kF32, 1, 8)->wait();
            } else if (comm.rank() == 1) {
                comm.recv(recv.data(), count, CommType::kF32, 0, 7)->wait();
                comm.send(buf.data(), count, CommType::kF32, 0, 8)->wait();
            }
        });
        sr.emplace_back(b, rt / 2);
    }
    p.all_reduce = fit_collective(ar, all_reduce_bus_factor(n));
    p.reduce_scatter = fit_collective(rs, shard_bus_factor(n));
    p.all_gather = fit_collective(ag, shard_bus_factor(n));
    p.send_recv = fit_collective(sr, 1.0);
    auto pts = [](const std::vector<std::pair<double, double>>& v) {
        nlohmann::json a = nlohmann::json::array();
        for (const auto& [b, s] : v) a.push_back({b, s});
        return a;
    };
    p.points = {{"all_reduce", pts(ar)},
                {"reduce_scatter", pts(rs)},
                {"all_gather", pts(ag)},
                {"send_recv", pts(sr)}};
    p.fit_points("calibration");
    return p;
}

// Note [Rendezvous on shared cores]
// With more rank threads than cores, a collective is a rendezvous of ranks that take turns on
// the cores: the first ranks to arrive sleep, and the last may be waiting for its core behind
// another rank's time slice. Timed back to back (measure_comm) the ranks do nothing else, so
// they are all ready; in a step they compute between calls. GPT config S on 4 one-thread
// ranks and 2 cores: dp 4 ZeRO-3 (about 70 collective calls a step, a gather per weight
// forward and backward) ran 0.12 s slower than ZeRO-0 (two) where the model, with the
// collectives' own times, had it 0.05 s faster. So the ranks here each compute `work` (about
// 1 ms alone on a core) and then all-reduce 4 KiB, 5 blocks of 16; the median block's time
// per call, less the work's share of the cores and the all-reduce alone, is what each call
// adds (rank 0's figure, every rank the same after the broadcast). 4 ranks on the 2-vCPU
// Xeon: 0-217 us a call in three calibrations of a minute (the all-reduce alone 35-120 us).
constexpr double kRendezvousWorkS = 1e-3;

struct BusyWork {
    int64_t reps = 0;
    double seconds = 0;  // the reps alone on a core
};

// Compute without memory traffic: `bench peak`'s register-only FMA loop, scalar (any CPU).
void spin(int64_t reps) { (void)peak::f32_fma_loop(peak::F32Isa::kScalar, reps, 1.0f, 1.0f); }

BusyWork busy_work(double target_s) {
    BusyWork w;
    int64_t reps = 1 << 16;
    for (;;) {
        Stopwatch sw;
        spin(reps);
        const double s = sw.elapsed_s();
        if (s >= target_s / 4 || reps > (int64_t{1} << 40)) {
            w.reps = std::max<int64_t>(
                1, static_cast<int64_t>(static_cast<double>(reps) * target_s / std::max(s, 1e-9)));
            break;
        }
        reps *= 4;
    }
    double best = 1e30;
    for (int i = 0; i < 3; ++i) {
        Stopwatch sw;
        spin(w.reps);
        best = std::min(best, sw.elapsed_s());
    }
    w.seconds = best;
    return w;
}

double measure_rendezvous(Communicator& comm, const BusyWork& work, int ranks, int cores,
                          double alone) {
    std::vector<float> buf(1024, 1.0f);
    constexpr int kCalls = 16, kBlocks = 5;
    std::vector<double> per_call;
    for (int block = 0; block < kBlocks; ++block) {
        comm.barrier()->wait();
        Stopwatch sw;
        for (int i = 0; i < kCalls; ++i) {
            spin(work.reps);
            comm.all_reduce(buf.data(), static_cast<int64_t>(buf.size()), CommType::kF32)->wait();
        }
        per_call.push_back(sw.elapsed_s() / kCalls);
    }
    std::nth_element(per_call.begin(), per_call.begin() + kBlocks / 2, per_call.end());
    double extra = std::max(
        0.0, per_call[kBlocks / 2] - work.seconds * static_cast<double>(ranks) / cores - alone);
    comm.broadcast(&extra, 1, CommType::kF64, 0)->wait();
    return extra;
}

std::string utc_now() {
    const std::time_t t = std::time(nullptr);
    char s[32];
    std::strftime(s, sizeof s, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
    return s;
}

}  // namespace

// Note [Disk calibration]
// The disk is measured on the engine's own path to it: an NvmeStore (io_uring, O_DIRECT, 8 MiB
// chunks at queue depth 8, offload/nvme_store.h), as the nvme tier reads and writes its swap
// file. Three figures: a write of `bytes`, a read of them back, and a mixed pass that reads the
// first half while writing the second, a chunk of each in turn, as the tiered optimizer step
// reads the next sub-group while writing the last one back (offload/tiered_state.cpp). The
// mixed rate counts the bytes of both directions. It is what the cost model takes for the
// tier's step (cost_model.cpp): measured before, with buffered one-direction copies at queue
// depth 1 added up, the model predicted 103 s for the 2.5B headline's NVMe step; the step took
// 26 s, its disk moving 60.8 GB at about 4 GB/s in both directions at once.
void measure_disk(const std::string& dir, int64_t bytes, MachineProfile& p) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    constexpr int64_t kPiece = int64_t{8} << 20;
    const int64_t half = std::max<int64_t>(2, (bytes + 2 * kPiece - 1) / (2 * kPiece)) * kPiece;
    void* a = nullptr;
    void* b = nullptr;
    try {
        NvmeStoreOptions o;
        o.dir = dir;
        o.name = "calibrate";
        o.bytes = static_cast<uint64_t>(2 * half);
        NvmeStore store(o);
        a = alloc_host_buffer(static_cast<size_t>(2 * half));
        std::memset(a, 'z', static_cast<size_t>(2 * half));
        b = alloc_host_buffer(static_cast<size_t>(2 * half));
        auto* src = static_cast<std::byte*>(a);
        auto* dst = static_cast<std::byte*>(b);
        Stopwatch sw;
        store.wait(store.write(0, src, static_cast<size_t>(2 * half)));
        const double write_s = sw.elapsed_s();
        sw.reset();
        store.wait(store.read(0, dst, static_cast<size_t>(2 * half)));
        const double read_s = sw.elapsed_s();
        sw.reset();
        std::vector<Store::Ticket> tickets;
        for (int64_t at = 0; at < half; at += kPiece) {
            tickets.push_back(store.read(static_cast<uint64_t>(at), dst + at, kPiece));
            tickets.push_back(
                store.write(static_cast<uint64_t>(half + at), src + half + at, kPiece));
        }
        for (Store::Ticket t : tickets) store.wait(t);
        const double mixed_s = sw.elapsed_s();
        p.disk_dir = dir;
        p.disk_write_bytes_per_s = static_cast<double>(2 * half) / write_s;
        p.disk_read_bytes_per_s = static_cast<double>(2 * half) / read_s;
        p.disk_mixed_bytes_per_s = static_cast<double>(2 * half) / mixed_s;
        p.disk_direct = store.direct();
    } catch (const Error&) {  // not writable, or too small: no disk figures (the profile says 0)
    }
    free_host_buffer(a);
    free_host_buffer(b);
}

CollectiveFit fit_collective(const std::vector<std::pair<double, double>>& points,
                             double bus_factor) {
    CollectiveFit f;
    if (points.empty() || bus_factor <= 0) return f;
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    const double n = static_cast<double>(points.size());
    for (const auto& [x, y] : points) {
        sx += x;
        sy += y;
        sxx += x * x;
        sxy += x * y;
    }
    const double den = n * sxx - sx * sx;
    double slope = den > 0 ? (n * sxy - sx * sy) / den : 0;
    double icept = (sy - slope * sx) / n;
    if (icept < 0) {  // through the origin
        icept = 0;
        slope = sxx > 0 ? sxy / sxx : 0;
    }
    if (slope <= 0) {  // flat: latency alone; a large bandwidth keeps bytes nearly free
        slope = 1e-15;
    }
    f.latency_s = icept;
    f.bus_bytes_per_s = bus_factor / slope;
    return f;
}

// Note [Measured rank speeds]
// `zerotrain plan --rank-speed 1,1,0.5,0.5` sizes pipeline stages to declared speeds (Note
// [Stages sized to speed], hetero.cpp). Under mpirun, `bench calibrate` measures them instead:
// each rank times the engine's own large f32 product (its library choice, the three training
// lanes averaged) at the threads it has, all ranks at once, since ranks run at once in training
// and share whatever their hosts share; rank r's speed is its rate over the fastest rank's. The
// speeds go into the profile (`rank_speeds`) and `--rank-speed measured` takes them. On one host
// of equal cores they come out near 1 (the planner then sizes stages as for equal ranks, up to
// the noise); across hosts of unequal CPUs they are what the declared figures guessed at.
std::vector<double> measure_rank_speeds(Communicator& comm) {
    const GemmChoice& c = current_gemm_choice();
    double sum = 0;
    int n = 0;
    for (GemmTrans t : {GemmTrans::kNN, GemmTrans::kNT, GemmTrans::kTN}) {
        const GemmClass cls{DType::kF32, t, GemmSize::kLarge};
        const double rate = measure_gemm_class(c.library_for(cls), cls);
        if (rate > 0) {
            sum += rate;
            ++n;
        }
    }
    std::vector<double> rates(static_cast<size_t>(comm.size()), 0.0);
    rates[static_cast<size_t>(comm.rank())] = n > 0 ? sum / n : 0.0;
    comm.all_reduce(rates.data(), static_cast<int64_t>(rates.size()), CommType::kF64)->wait();
    const double fastest = *std::max_element(rates.begin(), rates.end());
    ZT_CHECK(fastest > 0, "calibrate: no rank measured a GEMM rate");
    for (double& r : rates) r = std::max(r, 1e-9) / fastest;
    return rates;
}

MachineProfile calibrate_machine(const CalibrateOptions& opts) {
    Stopwatch total;
    MachineProfile p;
    p.identity = profile_identity();
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    std::vector<int> threads = opts.threads;
    if (threads.empty()) threads = cores > 1 ? std::vector<int>{1, cores} : std::vector<int>{1};
    std::sort(threads.begin(), threads.end());
    threads.erase(std::unique(threads.begin(), threads.end()), threads.end());
    // The MPI world's collectives first, every rank together; then rank 0 alone measures the
    // host (the others return: an idle rank polling in MPI would take a core from it).
    CommProfile mpi;
    const bool with_mpi = opts.mpi && opts.mpi->size() >= 2;
    if (with_mpi) {
        mpi = measure_comm(*opts.mpi, opts.seconds_per_kernel);
        // At the threads a rank trains with: the host's cores over its ranks.
        int per_host = 1;
        for (const char* var : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"})
            if (const char* v = std::getenv(var); v && std::atoi(v) > 0) {
                per_host = std::atoi(v);
                break;
            }
        const int before = num_threads();
        set_num_threads(std::max(1, cores / per_host));
        p.rank_speeds = measure_rank_speeds(*opts.mpi);
        set_num_threads(before);
    }
    if (opts.mpi && opts.mpi->rank() != 0) return p;
    const int saved_threads = num_threads();
    for (int t : threads) {
        set_num_threads(t);
        ThreadRates r;
        r.threads = t;
        gemm_rates(r);
        r.attention_flops = attention_rate(opts.seconds_per_kernel);
        r.elementwise_bytes_per_s = elementwise_rate(opts.seconds_per_kernel);
        r.op_overhead_s = op_overhead(opts.seconds_per_kernel / 3);
        // Note [Kernel times at the host's speed now] (speed_now.cpp); 0 for a team timed
        // without its cores.
        r.speed_ref_s = speed_reference(p, t);
        p.rates.push_back(r);
    }
    fill_team_costs(p);
    set_num_threads(saved_threads);
    if (opts.local_ranks >= 2)
        p.comm.push_back(measure_local_comm(opts.local_ranks, opts.seconds_per_kernel));
    if (with_mpi) p.comm.push_back(mpi);
    if (opts.disk_dir != "-") {
        std::string dir = opts.disk_dir.empty() ? default_gemm_cache_dir() : opts.disk_dir;
        if (dir.empty()) dir = std::filesystem::temp_directory_path().string();
        measure_disk(dir, opts.disk_bytes, p);
    }
    p.machine = {{"cores", cores},
                 {"gemm_libraries", gemm_libraries_identity()},
                 {"openblas_kernels", openblas_core_name()},
                 {"gemm_choice", current_gemm_choice().summary()}};
    p.measured_at = utc_now();
    p.seconds = total.elapsed_s();
    return p;
}

namespace {

// Note [A region in a step's rhythm]
// The seconds of an empty OpenMP region at `threads` opened 1 ms after the previous one ended,
// the master busy meanwhile (the median of 15). A GPT micro-batch opens a region about every
// 1.4 ms (config S at micro 2: 237 in 0.33 s), and between them the other threads sleep (under
// OMP_WAIT_POLICY=passive). Back to back, the engine's grain measurement (ParallelGrain::region_s)
// saw 3-50 us here depending on the minute (the host's halt polling keeps a waking vCPU cheap
// for a while); 1 ms apart, 75-116 us in two runs and 5 us in a third, and the step's extra time
// per extra region (micro 2 x 4 against micro 8) was 90-150 us.
constexpr double kRegionGapS = 1e-3;

}  // namespace

int fill_team_costs(MachineProfile& p) {
    int filled = 0;
    for (ThreadRates& r : p.rates) {
        if (r.threads <= 1 || (r.team_region_s > 0 && r.team_min_elems > 0)) continue;
        r.team_region_s = median_empty_region_s(r.threads, 15, kRegionGapS);
        r.team_min_elems = static_cast<double>(parallel_grain(r.threads).min_elems);
        ++filled;
    }
    return filled;
}

// Note [Collectives at the run's rank count]
// The local backend's collectives were timed at 2 rank threads and scaled to other counts by the
// bus factor alone. Four one-thread ranks on two cores (`bench calibrate --local-ranks 4`, the
// same minute): all-reduce of 4 KiB 121 us against 31 us at 2 ranks, 16 MiB 6.4 ms against 2.1
// (the fit's scaling by the bus factor 1.5: 3.1 ms); reduce-scatter and all-gather alike (87 us
// against 21, 3.8 and 2.8 ms against 1.6 and 1.5). More rank threads than cores pay the
// scheduler at every rendezvous: a rank's turn waits for the ranks sharing its core. The planner
// predicted the exposed communication of DLRM's 4-rank layouts at 0.08-0.13 ms where 0.9-1.1 ms
// was measured, and GPT config M's dp 4 ZeRO-3 at 0.15 s against 0.57. So a plan or a run of N
// local ranks measures the collectives at N threads when the profile has no fit at N (half a
// second at 4 ranks; fill_local_comm, planner/shape_times.h), and costs with the fit measured
// nearest its rank count (comm_for).
CommProfile measure_local_comm(int ranks, double seconds_per_kernel) {
    const int saved_threads = num_threads();
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    const BusyWork work = ranks > cores ? busy_work(kRendezvousWorkS) : BusyWork{};
    CommProfile local;
    run_local_ranks(ranks, [&](Communicator& c) {
        set_num_threads(1);
        CommProfile m = measure_comm(c, seconds_per_kernel);
        m.rendezvous_s = 0;  // a core per rank: none
        if (ranks > cores) {
            const double alone = m.all_reduce.time_s(4096, all_reduce_bus_factor(ranks));
            m.rendezvous_s = measure_rendezvous(c, work, ranks, cores, alone);
        }
        if (c.rank() == 0) local = m;
    });
    set_num_threads(saved_threads);
    return local;
}

std::optional<MachineProfile> profile_for_machine(const std::string& given, bool measure,
                                                  std::string* said) {
    if (!given.empty()) {  // the user's file, as it is: a plan for another machine is allowed
        std::optional<MachineProfile> p = load_profile(given);
        ZT_CHECK(p, "--profile ", given,
                 ": no such file; write one with `zerotrain bench "
                 "calibrate --out FILE`");
        if (said)
            *said = str_cat("profile ", given, " (measured ", p->measured_at,
                            p->identity == profile_identity() ? "" : ", on another machine", ")");
        return p;
    }
    const std::string path = default_profile_path();
    std::string why = "none saved";
    if (!path.empty()) {
        std::optional<MachineProfile> p = load_profile(path);
        if (p && p->identity == profile_identity()) {
            if (said) *said = str_cat("profile ", path, " (measured ", p->measured_at, ")");
            return p;
        }
        if (p) why = "it was measured on another machine or library set";
    }
    if (!measure) {
        if (said)
            *said = str_cat("no calibration profile for this machine (", why,
                            "): run `zerotrain bench calibrate`");
        return std::nullopt;
    }
    MachineProfile p = calibrate_machine({});
    if (!path.empty()) save_profile(p, path);
    if (said)
        *said = str_cat("profile ", path.empty() ? std::string("(not saved)") : path,
                        " measured now (", why, "; ", p.seconds, " s)");
    return p;
}

}  // namespace zt
