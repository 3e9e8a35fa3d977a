// The median of a set of numbers (the mean of the middle two for an even count; NaN when empty).
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

namespace zt {

inline double median(std::vector<double> v) {
    if (v.empty()) return NAN;
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace zt
