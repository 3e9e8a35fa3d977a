#include "util/random.h"

#include <cmath>

namespace zt {

uint64_t hash_string(const std::string& s) {
    uint64_t h = 1469598103934665603ull;
    for (unsigned char c : s) {
        h ^= c;
        h *= 1099511628211ull;
    }
    return h;
}

double normal01(uint64_t seed, uint64_t stream, uint64_t index) {
    double u1 = uniform01(seed, stream, 2 * index);
    double u2 = uniform01(seed, stream, 2 * index + 1);
    if (u1 < 1e-300) u1 = 1e-300;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

}  // namespace zt
