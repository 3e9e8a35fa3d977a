#include "tensor/threads.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <map>
#include <mutex>
#include <vector>

#include "tensor/gemm.h"
#include "util/error.h"

namespace zt {

void set_num_threads(int n) {
    ZT_CHECK(n >= 1, "threads: expected at least 1, got ", n);
    omp_set_num_threads(n);
    gemm_set_num_threads(n);
}

int num_threads() { return omp_get_max_threads(); }

ScopedOmpThreads::ScopedOmpThreads(int n) : prev_(omp_get_max_threads()) {
    omp_set_num_threads(n);
}
ScopedOmpThreads::~ScopedOmpThreads() { omp_set_num_threads(prev_); }

// Note [Measured parallel grain]
// A kernel loop runs on the OpenMP team only when its work outweighs starting the team. What a
// start costs depends on the machine and on the environment, not on the kernel: with OpenMP's
// default wait the team's threads spin between regions and an empty region takes ~3 us on two
// Zen 5 vCPUs; with OMP_WAIT_POLICY=passive (the test suite's, and the benchmarks' for ranks as
// threads) they sleep, and each region wakes them through the kernel: ~45 us measured. The
// kernels' fixed thresholds (2^14 - 2^16 elements) were right for the first and made small
// models twice as slow under the second: the DLRM example's step (tables of 16 wide, MLPs of 64)
// took 1.25-1.4 ms at two threads against 0.62 ms at one, ~20 regions a step each waking the
// other thread. So the break-even is measured once per thread count t: r, the median of
// back-to-back empty regions, and e, one thread's seconds per element of a light pass
// (y = max(x, 0) over 1M floats, past the core's own caches as activations are, the fastest of
// three; over 16k floats in L1 it is 4x faster and made loops of a few MB run alone). A loop of n
// elements takes n e alone and n e / t + r on the team, so the team pays from n > r t / ((t - 1)
// e); a kernel's own floor stays the lower bound (its per-element work may be heavier than the
// pass, and a region that costs nothing still splits cache lines). Choosing fewer threads never
// changes a result: every kernel's split is made to give the same bits at any thread count.
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Note [Small products on one thread]
// A matrix product and the passes around it are loops like any other: on the team they pay the
// region's start. OpenBLAS products ran on the team from a fixed 4 MFLOP, oneDNN's always did
// (split as it chose), and the bias add after an OpenBLAS product (gemm.cpp's add_bias_rows) from
// a fixed 2^15 elements; under OMP_WAIT_POLICY=passive each region woke the other thread through
// the kernel. The DLRM of the planner bench (MLPs of 64) ran a step of one 512-sample micro-batch
// in 0.81-0.96 ms against 0.66-0.71 ms for two of 256 (the same work): at 512 rows each Linear's
// bias add (512 x 64 = 2^15 elements) opened a region (perf: 62% of the run's thread wakes from
// gemm_bias); with the measured grain there, 0.67-0.72 ms. The products get the same rule: f32
// products below the break-even of the region against one thread's rate run on the calling
// thread: n FLOPs take n f alone and n f / t + r on the team, so the team pays from
// n > r t / ((t - 1) f), f measured once per count on a 128^3 product through oneDNN at one
// thread (the fastest of five; 15 MFLOP at two threads here). 16-bit products keep the team
// (their rate is not the f32 one). Fewer threads give the same bits: OpenBLAS's split is by rows
// of C, and oneDNN's f32 products split over M and N blocks, not K (the GEMM tests compare thread
// counts).
double one_thread_product_s_per_flop() {
    constexpr int64_t kN = 128;
    std::vector<float> a(kN * kN, 0.5f), b(kN * kN, 0.25f), c(kN * kN);
    const ScopedOmpThreads one(1);
    double best = 1e9;
    for (int rep = 0; rep < 7; ++rep) {
        const auto t0 = std::chrono::steady_clock::now();
        gemm_with(GemmLibrary::kOneDnn, kN, kN, kN, 1.0f, {a.data(), kN, false},
                  {b.data(), kN, false}, DType::kF32, 0.0f, c.data(), kN, DType::kF32);
        if (rep >= 2) best = std::min(best, seconds_since(t0));  // two to warm up
    }
    return best / (2.0 * kN * kN * kN);
}

ParallelGrain measure_grain(int threads) {
    ParallelGrain g;
    if (threads <= 1) return g;
    std::atomic<int> sink{0};
    g.region_s = median_empty_region_s(threads, 25, 0);
    constexpr int64_t kPass = 1 << 20;
    std::vector<float> x(kPass), y(kPass);
    for (int64_t i = 0; i < kPass; ++i) x[i] = static_cast<float>(i % 7) - 3.0f;
    double best = 1e9;
    for (int rep = 0; rep < 3; ++rep) {
        const auto t0 = std::chrono::steady_clock::now();
        for (int64_t i = 0; i < kPass; ++i) y[i] = std::max(x[i], 0.0f);
        best = std::min(best, seconds_since(t0));
        sink.fetch_add(static_cast<int>(y[rep]), std::memory_order_relaxed);
    }
    g.per_elem_s = std::max(best / kPass, 1e-12);
    const double even = g.region_s * threads / ((threads - 1) * g.per_elem_s);
    g.min_elems = static_cast<int64_t>(std::min(std::ceil(even), 1e15));
    g.per_flop_s = std::max(one_thread_product_s_per_flop(), 1e-15);
    g.min_flops = std::min(g.region_s * threads / ((threads - 1) * g.per_flop_s), 1e15);
    return g;
}

std::atomic<bool> floors_only{false};
std::mutex grain_mu;
std::map<int, ParallelGrain>& grains() {
    static std::map<int, ParallelGrain> m;
    return m;
}

}  // namespace

double median_empty_region_s(int threads, int reps, double gap_s) {
    std::atomic<int> sink{0};
    const auto region = [&] {
#pragma omp parallel num_threads(threads)
        sink.fetch_add(1, std::memory_order_relaxed);
    };
    for (int i = 0; i < 4; ++i) region();  // the pool made and warm
    std::vector<double> t(static_cast<size_t>(std::max(1, reps)));
    for (double& s : t) {
        const auto gap = std::chrono::steady_clock::now();
        while (seconds_since(gap) < gap_s) sink.fetch_add(0, std::memory_order_relaxed);
        const auto t0 = std::chrono::steady_clock::now();
        region();
        s = seconds_since(t0);
    }
    std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
    return t[t.size() / 2];
}

ParallelGrain parallel_grain(int threads) {
    if (threads <= 1) return {};
    std::lock_guard<std::mutex> lock(grain_mu);
    auto it = grains().find(threads);
    if (it == grains().end()) it = grains().emplace(threads, measure_grain(threads)).first;
    return it->second;
}

void set_parallel_floors_only(bool on) { floors_only.store(on); }

namespace {

// The current thread count's grain, or null where the kernels' floors apply (one thread, inside a
// region, or floors only). The last count's grain per calling thread: a lookup without the lock.
const ParallelGrain* current_grain() {
    const int threads = omp_get_max_threads();
    if (threads <= 1 || omp_in_parallel() || floors_only.load(std::memory_order_relaxed))
        return nullptr;
    thread_local int cached_threads = 0;
    thread_local ParallelGrain cached;
    if (cached_threads != threads) {
        cached = parallel_grain(threads);
        cached_threads = threads;
    }
    return &cached;
}

}  // namespace

double parallel_min_flops(double floor) {
    const ParallelGrain* g = current_grain();
    return g ? std::max(floor, g->min_flops) : floor;
}

int64_t parallel_min_elems(int64_t floor) {
    const ParallelGrain* g = current_grain();
    return g ? std::max(floor, g->min_elems) : floor;
}

}  // namespace zt
