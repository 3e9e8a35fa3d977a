// Wall-clock timing helpers (steady clock, seconds as double).
#pragma once

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

}  // namespace zt
