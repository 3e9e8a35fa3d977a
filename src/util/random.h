// Counter-based random numbers: a value depends only on (seed, stream, index), never on call order
// or thread count, so initial weights and shuffles are the same on every layout (DESIGN.md).
#pragma once

#include <cstdint>
#include <string>

namespace zt {

inline uint64_t splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

// FNV-1a, for turning a parameter name into a stream id.
uint64_t hash_string(const std::string& s);

// Uniform in [0, 1) with 53 random bits.
inline double uniform01(uint64_t seed, uint64_t stream, uint64_t index) {
    uint64_t h = splitmix64(seed ^ splitmix64(stream ^ splitmix64(index)));
    return static_cast<double>(h >> 11) * (1.0 / 9007199254740992.0);
}

// Standard normal (Box-Muller on two counter-based uniforms).
double normal01(uint64_t seed, uint64_t stream, uint64_t index);

// Sequential generator for places where order is fixed (data generation, shuffles).
class Rng {
public:
    explicit Rng(uint64_t seed) : state_(seed) {}
    uint64_t next() { return splitmix64(state_++); }
    double uniform() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }
    uint64_t below(uint64_t n) { return n == 0 ? 0 : next() % n; }  // bias below 2^-40 for n < 2^24

private:
    uint64_t state_;
};

}  // namespace zt
