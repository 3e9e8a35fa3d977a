// Stable LSD radix sort of 64-bit keys on a bit field, 8 bits a pass: O(n) a pass, about twice as
// fast as a comparison sort for the few thousand ids of a batch. Used by the embedding-bag
// backward (ids by row) and the sharded-table exchange (ids and gradient rows by row).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace zt {

// The number of bits a value below `bound` needs (0 for bound <= 1).
inline int bits_below(int64_t bound) {
    int bits = 0;
    while (bits < 63 && (int64_t{1} << bits) < bound) ++bits;
    return bits;
}

// Sorts keys by bits [shift, shift + bits), stably (keys equal there keep their order); tmp is
// scratch, resized to keys.size().
inline void radix_sort_field(std::vector<uint64_t>& keys, int shift, int bits,
                             std::vector<uint64_t>& tmp) {
    tmp.resize(keys.size());
    for (int s = shift; s < shift + bits; s += 8) {
        size_t start[257] = {};
        for (uint64_t k : keys) ++start[((k >> s) & 0xff) + 1];
        for (int d = 0; d < 256; ++d) start[d + 1] += start[d];
        for (uint64_t k : keys) tmp[start[(k >> s) & 0xff]++] = k;
        keys.swap(tmp);
    }
}

}  // namespace zt
