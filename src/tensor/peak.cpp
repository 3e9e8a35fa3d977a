// Timing of the peak loops (tensor/peak_kernels.h) on OpenMP threads. Each thread runs its own
// copy of a loop after a barrier; a rate is the work of all threads over the slowest thread's
// seconds, best of kRepeats. The memory kernel reads a buffer that no cache holds, each thread its
// own slice, first touched by that thread (so its pages sit on that thread's NUMA node).
#include "tensor/peak.h"

#include <omp.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <vector>

#include "tensor/peak_kernels.h"
#include "util/error.h"
#include "util/host_memory.h"
#include "util/timer.h"

namespace zt {

namespace {

constexpr int kRepeats = 3;
constexpr size_t kMinMemBytes = size_t{1} << 30;  // 1 GiB
constexpr size_t kSliceAlign = 16;                // floats: 64 bytes, one cache line

struct Timed {
    double work = 0;     // summed over threads
    double seconds = 0;  // the slowest thread's
    int threads = 0;     // threads OpenMP gave
};

// fn(thread, threads) on `threads` threads started together; returns the work fn reports.
template <class Fn>
Timed run_parallel(int threads, const Fn& fn) {
    std::vector<double> work(threads, 0), seconds(threads, 0);
    int got = 0;
#pragma omp parallel num_threads(threads)
    {
#pragma omp single
        got = omp_get_num_threads();  // the implicit barrier here starts the threads together
        const int t = omp_get_thread_num();
        Stopwatch sw;
        work[t] = fn(t, got);
        seconds[t] = sw.elapsed_s();
    }
    Timed r;
    r.threads = got;
    for (int t = 0; t < got; ++t) {
        r.work += work[t];
        r.seconds = std::max(r.seconds, seconds[t]);
    }
    return r;
}

// Iterations of `loop` that take about `seconds` on one thread. The first short calls also warm
// the unit up (AVX-512 and AMX units power up on first use, and the clock may change).
template <class Loop>
int64_t calibrate(const Loop& loop, double seconds) {
    for (int64_t iters = 256;; iters *= 4) {
        Stopwatch sw;
        loop(iters);
        const double t = sw.elapsed_s();
        if (t >= seconds / 8 || iters >= (int64_t{1} << 40))
            return std::max<int64_t>(1, static_cast<int64_t>(iters * (seconds / std::max(t, 1e-9))));
    }
}

// FLOP/s of `loop` on `threads` threads, each running about `seconds`; best of kRepeats.
template <class Loop>
double best_rate(int threads, double seconds, const Loop& loop, int* got) {
    const int64_t iters = calibrate(loop, seconds);
    double best = 0;
    for (int rep = 0; rep < kRepeats; ++rep) {
        const Timed t = run_parallel(threads, [&](int, int) { return loop(iters).flops; });
        *got = t.threads;
        if (t.seconds > 0) best = std::max(best, t.work / t.seconds);
    }
    return best;
}

// Anonymous memory for the read kernel, unmapped on destruction. Ordinary pages, as the engine's
// pools get: MADV_HUGEPAGE made the first touch of 2 GiB take 6.5 s of compaction here.
class MappedFloats {
public:
    explicit MappedFloats(size_t bytes) : bytes_(bytes) {
        void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        ZT_CHECK(p != MAP_FAILED, "peak: cannot map ", bytes, " bytes for the memory kernel: ",
                 std::strerror(errno), "; free memory or measure compute only");
        data_ = static_cast<float*>(p);
    }
    ~MappedFloats() { munmap(data_, bytes_); }
    MappedFloats(const MappedFloats&) = delete;
    MappedFloats& operator=(const MappedFloats&) = delete;
    float* data() const { return data_; }
    size_t size() const { return bytes_ / sizeof(float); }

private:
    size_t bytes_;
    float* data_ = nullptr;
};

// Thread t's slice [begin, end) of n floats, cut at cache lines.
std::pair<size_t, size_t> slice(size_t n, int t, int threads) {
    const size_t per = n / threads / kSliceAlign * kSliceAlign;
    const size_t begin = per * t;
    return {begin, t == threads - 1 ? n : begin + per};
}

// Faults in the pages of p[0, n) from the calling thread (first touch: its NUMA node), in one
// call where the kernel has MADV_POPULATE_WRITE (Linux 5.14), page by page otherwise.
void populate(float* p, size_t n, size_t page) {
    constexpr int kMadvPopulateWrite = 23;
    const uintptr_t first = reinterpret_cast<uintptr_t>(p) / (page * sizeof(float)) *
                            (page * sizeof(float));
    const uintptr_t last = reinterpret_cast<uintptr_t>(p + n);
    if (n > 0 && madvise(reinterpret_cast<void*>(first), last - first, kMadvPopulateWrite) == 0)
        return;
    for (size_t i = 0; i < n; i += page) p[i] = 0.0f;
}

// Bytes per second of reading the buffer, all threads at once.
double measure_mem_read(int threads, double seconds) {
    MappedFloats buf(peak_mem_buffer_bytes());
    const size_t n = buf.size();
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE)) / sizeof(float);
    run_parallel(threads, [&](int t, int nt) {
        auto [b, e] = slice(n, t, nt);
        populate(buf.data() + b, e - b, page);
        return 0.0;
    });
    auto read = [&](int passes) {
        return run_parallel(threads, [&, passes](int t, int nt) {
            auto [b, e] = slice(n, t, nt);
            double bytes = 0;
            for (int p = 0; p < passes; ++p) bytes += peak::mem_read(buf.data() + b, e - b).flops;
            return bytes;
        });
    };
    const Timed first = read(1);
    const int passes =
        std::max(1, static_cast<int>(std::lround(seconds / std::max(first.seconds, 1e-9))));
    double best = first.seconds > 0 ? first.work / first.seconds : 0;
    for (int rep = 0; rep < kRepeats; ++rep) {
        const Timed t = read(passes);
        if (t.seconds > 0) best = std::max(best, t.work / t.seconds);
    }
    return best;
}

void check_args(int threads, double seconds) {
    ZT_CHECK(threads >= 1, "peak: threads: expected at least 1, got ", threads);
    ZT_CHECK(std::isfinite(seconds) && seconds > 0,
             "peak: seconds per kernel: expected a positive number, got ", seconds);
}

// The largest level-3 cache of cpu0, from sysfs; 0 when sysfs does not say.
size_t l3_cache_bytes() {
    size_t best = 0;
    for (int i = 0; i < 16; ++i) {
        const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i);
        std::ifstream level(dir + "/level"), size(dir + "/size");
        int lv = 0;
        std::string text;
        if (level >> lv && lv == 3 && size >> text) best = std::max(best, parse_cache_size(text));
    }
    return best;
}

}  // namespace

double PeakRates::bf16_flops() const { return std::max(bf16_dot_flops, amx_bf16_flops); }

size_t parse_cache_size(const std::string& text) {
    size_t pos = 0;
    unsigned long long v = 0;
    try {
        v = std::stoull(text, &pos);
    } catch (const std::exception&) {
        return 0;
    }
    const std::string unit = text.substr(pos);
    if (unit.empty()) return v;
    if (unit == "K") return v << 10;
    if (unit == "M") return v << 20;
    if (unit == "G") return v << 30;
    return 0;
}

size_t peak_mem_buffer_bytes(size_t l3_bytes, size_t phys_bytes) {
    size_t bytes = std::max(4 * l3_bytes, kMinMemBytes);
    if (phys_bytes > 0) bytes = std::min(bytes, phys_bytes / 4);
    return bytes / 4096 * 4096;
}

size_t peak_mem_buffer_bytes() {
    return peak_mem_buffer_bytes(l3_cache_bytes(), static_cast<size_t>(host_memory_bytes()));
}

PeakRates measure_compute_peak(int threads, double seconds) {
    check_args(threads, seconds);
    // Operands through a volatile: the loops' results cannot be known when compiling.
    volatile float one = 1.0f;
    const float a = one, b = one;
    PeakRates r;
    const peak::F32Isa isa = peak::f32_isa_best();
    r.isa = peak::f32_isa_name(isa);
    r.f32_fma_flops = best_rate(
        threads, seconds, [&](int64_t n) { return peak::f32_fma_loop(isa, n, a, b); }, &r.threads);
    if (peak::bf16_dot_supported()) {
        r.isa += "+avx512_bf16";
        r.bf16_dot_flops = best_rate(
            threads, seconds, [&](int64_t n) { return peak::bf16_dot_loop(n, a, b); }, &r.threads);
    }
    const peak::AmxState amx = peak::amx_state();
    if (amx == peak::AmxState::kReady) {
        r.isa += "+amx_bf16";
        r.amx_bf16_flops = best_rate(
            threads, seconds, [&](int64_t n) { return peak::amx_bf16_loop(n, a, b); }, &r.threads);
    } else if (amx == peak::AmxState::kDenied) {
        r.isa += " (amx_bf16 present but the OS refused tile data: not measured)";
    }
    return r;
}

PeakRates measure_peak(int threads, double seconds) {
    PeakRates r = measure_compute_peak(threads, seconds);
    r.mem_read_bytes_per_s = measure_mem_read(threads, seconds);
    return r;
}

}  // namespace zt
