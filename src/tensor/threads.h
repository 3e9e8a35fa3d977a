// Intra-op thread count shared by our kernels (OpenMP), oneDNN (OpenMP) and OpenBLAS, and when a
// loop is worth the team at all (Note [Measured parallel grain] in threads.cpp).
#pragma once

#include <cstdint>

namespace zt {

void set_num_threads(int n);
int num_threads();

// The fewest elements of light per-element work (a pass or two over floats) for which a loop
// should run on the intra-op team rather than on the calling thread: at least `floor` (the
// kernel's own figure, right when the team wakes at once), raised to the break-even of this
// machine's fork and join at the current thread count, measured once per count.
int64_t parallel_min_elems(int64_t floor);
// The fewest FLOPs of an f32 matrix product for which it should run on the intra-op team: at
// least `floor`, raised to the break-even of this machine's fork and join against one thread's
// product rate (Note [Small products on one thread] in threads.cpp).
double parallel_min_flops(double floor);
// true: parallel_min_elems and parallel_min_flops return the floor, as on a machine whose team
// wakes at once (the unit tests, so that every kernel's parallel path runs at 2 threads whatever
// the wait policy); false (the default): the measured break-even.
void set_parallel_floors_only(bool on);

// What the break-even is made of, at `threads` threads (measured on first use; threads <= 1:
// zeros): the seconds an empty parallel region takes, the seconds one thread spends per element
// of a light pass and per FLOP of a small product, and the break-evens.
struct ParallelGrain {
    double region_s = 0;
    double per_elem_s = 0;
    int64_t min_elems = 0;
    double per_flop_s = 0;  // one thread's seconds per FLOP of a small f32 product
    double min_flops = 0;   // the products' break-even
};
ParallelGrain parallel_grain(int threads);
// The median seconds of `reps` empty OpenMP regions at `threads`, each opened `gap_s` after the
// last ended with the calling thread busy meanwhile (0: back to back), after four to make the
// team.
double median_empty_region_s(int threads, int reps, double gap_s);

// Sets the calling thread's OpenMP thread count for its scope and restores the previous one
// (exceptions included). Only OpenMP's count: OpenBLAS is single-threaded anyway.
class ScopedOmpThreads {
  public:
    explicit ScopedOmpThreads(int n);
    ~ScopedOmpThreads();
    ScopedOmpThreads(const ScopedOmpThreads&) = delete;
    ScopedOmpThreads& operator=(const ScopedOmpThreads&) = delete;

  private:
    int prev_;
};

}  // namespace zt
