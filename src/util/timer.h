// Wall-clock timing helpers (steady clock, seconds as double).
#pragma once

#include <algorithm>
#include <chrono>

namespace zt {

inline double now_s() {
    using namespace std::chrono;
    return duration<double>(steady_clock::now().time_since_epoch()).count();
}

class Stopwatch {
public:
    Stopwatch() : start_(now_s()) {}
    double elapsed_s() const { return now_s() - start_; }
    void reset() { start_ = now_s(); }

private:
    double start_;
};

// Seconds per call of fn: one warm-up call (primitives made, pages touched), then the best of
// three runs of at least min_s / 3 each. For calibration, not for tests.
template <typename Fn>
double seconds_per_call(Fn&& fn, double min_s) {
    fn();
    double best = 1e30;
    for (int rep = 0; rep < 3; ++rep) {
        int iters = 0;
        Stopwatch sw;
        do {
            fn();
            ++iters;
        } while (sw.elapsed_s() < min_s / 3);
        best = std::min(best, sw.elapsed_s() / iters);
    }
    return best;
}

}  // namespace zt
